"""docs/cli.md must be what the commands' ``--help`` prints today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_cli_reference_is_current() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/cli_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
