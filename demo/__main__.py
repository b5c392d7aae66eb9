"""``python -m demo``: run the product end to end and print a checked summary (exit 0 when all checks hold)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from demo.run import Demo
from demo.settings import load
from demo.summary import render
from llmpipe.errors import ConfigError, PipelineError
from llmpipe.runtime import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    """Run once; 0 when every check held, 1 when a check failed, 2 on a bad option or a failed run."""
    configure_logging("WARNING")
    try:
        settings = load(argv)
    except ConfigError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    try:
        report = Demo(settings).run()
    except PipelineError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    text = render(report)
    print(text)
    (settings.run_dir / "summary.txt").write_text(text + "\n")
    return 0 if report.verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
