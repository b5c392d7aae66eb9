"""How the GPU backend's feeding thread waits for the device (``--device-wait``), without a GPU.

``driver`` leaves the wait to the CUDA event (which spins a core while the host has more cores than
contexts); ``block`` too, on an event the CUDA executor made for blocking waits (its bytes are the
GPU tier's to check); ``poll`` asks the event and sleeps between questions. The event here is a stand-in that
counts how it was asked; the setting is checked from the command line to the lane's executor.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_stage.transform.api import POLL_S, TransformSettings
from gpu_stage.transform.device import executor as executor_module
from gpu_stage.transform.device.executor import wait_for
from llmpipe.errors import ConfigError


class _Event:
    """Done after ``ready_after`` questions; counts questions and synchronizes."""

    def __init__(self, ready_after: int) -> None:
        self.ready_after = ready_after
        self.queries = 0
        self.synchronized = 0

    def query(self) -> bool:
        self.queries += 1
        return self.queries > self.ready_after

    def synchronize(self) -> None:
        self.synchronized += 1


@pytest.mark.parametrize("how", ["driver", "block"])
def test_driver_and_block_leave_the_wait_to_the_event(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(executor_module.time, "sleep", slept.append)
    event = _Event(ready_after=5)
    wait_for(event, how)  # type: ignore[arg-type]
    assert (event.synchronized, event.queries, slept) == (1, 0, [])


def test_poll_asks_until_done_and_sleeps_between_questions(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(executor_module.time, "sleep", slept.append)
    event = _Event(ready_after=3)
    wait_for(event, "poll")
    assert (event.synchronized, event.queries, slept) == (0, 4, [POLL_S] * 3)
    done = _Event(ready_after=0)
    wait_for(done, "poll", poll_s=0.5)
    assert (done.queries, slept[3:]) == (1, [])


def test_the_setting_goes_from_the_command_line_to_the_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numba")
    from gpu_stage.settings import parse
    from gpu_stage.transform.device.executor import CpuExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    assert parse([])[1].device_wait == TransformSettings().device_wait == "driver"
    assert parse(["--device-wait", "poll"])[1].device_wait == "poll"
    assert parse(["--device-wait", "block"])[1].device_wait == "block"
    monkeypatch.setenv("GPU_STAGE_DEVICE_WAIT", "poll")
    assert parse([])[1].device_wait == "poll"
    monkeypatch.setenv("GPU_STAGE_DEVICE_WAIT", "sleep")
    with pytest.raises(ConfigError) as refused:
        parse([])
    assert str(refused.value) == "GPU_STAGE_DEVICE_WAIT (--device-wait) must be one of driver, poll, block, not 'sleep'"
    lane = LaneTransform(replace(TransformSettings(), device_wait="poll"), CpuExecutor)
    assert lane.executor.device_wait == "poll"
