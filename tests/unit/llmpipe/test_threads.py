"""CPU by thread group, from /proc: which thread of a process spends the CPU."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from llmpipe import threads


@pytest.mark.parametrize(
    ("python_name", "comm", "group"),
    [
        ("MainThread", "python", "main"),
        ("parse_0", "python", "parse"),
        ("commit_12", "python", "commit"),
        (None, "rdk:broker3", "rdk:broker"),
        (None, "rdk:broker-1", "rdk:broker"),
        (None, "rdk:main", "rdk:main"),
        (None, "cuda-EvtHandlr", "cuda-EvtHandlr"),
        (None, "7", "other"),
    ],
)
def test_group_names_drop_thread_numbers(python_name: str | None, comm: str, group: str) -> None:
    assert threads.group_of(python_name, comm) == group


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_busy_thread_is_counted_in_its_own_group() -> None:
    before = threads.cpu_by_group()
    done = threading.Event()
    spinner = threading.Thread(target=lambda: (_spin(0.3), done.wait()), name="spinner_0")
    spinner.start()
    try:
        while spinner.is_alive() and not done.is_set():
            after = threads.cpu_by_group()
            if after.get("spinner", 0.0) >= 0.29:
                break
            time.sleep(0.02)
        after = threads.cpu_by_group()
    finally:
        done.set()
        spinner.join()
    assert after["spinner"] >= 0.29  # its 0.3 s of CPU, at clock-tick resolution (10 ms)
    assert after["main"] >= before["main"]
    assert "spinner" not in before


def test_per_record_us_is_each_groups_difference_largest_first() -> None:
    before = {"main": 1.0, "parse": 2.0}
    after = {"main": 1.5, "parse": 2.1, "rdk:broker": 0.2, "idle": 0.0}
    spent = threads.per_record_us(before, after, 100_000)
    assert spent == pytest.approx({"main": 5.0, "rdk:broker": 2.0, "parse": 1.0})
    assert list(spent) == ["main", "rdk:broker", "parse"]
    assert threads.per_record_us(before, after, 0) == {}
