"""``--log-level``'s spec: the root's level, then any ``logger=LEVEL``."""

from __future__ import annotations

import logging

import pytest

from llmpipe.runtime import logging_levels


def test_a_plain_level_is_the_roots() -> None:
    assert logging_levels("info") == (logging.INFO, {})


def test_named_loggers_get_their_own_level() -> None:
    root, named = logging_levels("WARNING, gpu_stage.worker=DEBUG,numba=error")
    assert root == logging.WARNING
    assert named == {"gpu_stage.worker": logging.DEBUG, "numba": logging.ERROR}


@pytest.mark.parametrize("spec", ["", "LOUD", "INFO,gpu_stage.worker", "INFO,=DEBUG", "INFO,x=LOUD"])
def test_a_malformed_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        logging_levels(spec)


def test_the_worker_refuses_a_bad_spec_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_stage.settings import parse

    assert parse(["--log-level", "INFO,gpu_stage.worker=DEBUG"])[0].log_level == "INFO,gpu_stage.worker=DEBUG"
    with pytest.raises(SystemExit):
        parse(["--log-level", "INFO,gpu_stage.worker"])
    assert "--log-level" in capsys.readouterr().err
