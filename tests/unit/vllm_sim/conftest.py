from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import openai
import pytest

from vllm_sim.config import FaultRates, SimConfig
from vllm_sim.testing import running


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with running(SimConfig(seed=7)) as url:
        yield url


@pytest.fixture(scope="module")
def client(sim_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0, timeout=10)


@pytest.fixture
def faulty() -> Callable[..., AbstractContextManager[str]]:
    """A simulator where one fault happens on every attempt."""

    def make(**rates: float) -> AbstractContextManager[str]:
        return running(SimConfig(seed=1, faults=FaultRates(**rates)))

    return make
