"""A bad demo option (flag or env var) is one line and exit 2, before anything starts."""

from __future__ import annotations

import pytest

from demo.__main__ import main


def test_bad_env_value_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEMO_REQUESTS", "abc")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("demo: DEMO_REQUESTS (--requests)")
    assert "Traceback" not in err
