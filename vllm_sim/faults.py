"""Draw at most one injected fault per HTTP attempt."""

from __future__ import annotations

import random
from enum import StrEnum

from vllm_sim.config import FaultRates


class Fault(StrEnum):
    """What goes wrong with one attempt (``NONE``: nothing)."""

    NONE = "none"
    TOO_MANY = "429"
    SERVER_ERROR = "500"
    UNAVAILABLE = "503"
    BAD_REQUEST = "400"
    HANG = "hang"
    RESET = "reset"
    TRUNCATE = "truncate"


def draw(rng: random.Random, rates: FaultRates) -> Fault:
    """One uniform draw against the cumulative rates, so the total fault rate is exactly their sum."""
    point = rng.random()
    edge = 0.0
    for fault, rate in (
        (Fault.TOO_MANY, rates.rate_429),
        (Fault.SERVER_ERROR, rates.rate_500),
        (Fault.UNAVAILABLE, rates.rate_503),
        (Fault.BAD_REQUEST, rates.rate_400),
        (Fault.HANG, rates.rate_hang),
        (Fault.RESET, rates.rate_reset),
        (Fault.TRUNCATE, rates.rate_truncate),
    ):
        edge += rate
        if point < edge:
            return fault
    return Fault.NONE
