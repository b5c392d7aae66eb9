"""``group_members`` asks again while the group's coordinator moves, and fails clearly otherwise (no broker)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from llmpipe.errors import SourceError
from llmpipe.kafka_io import KafkaSettings, cluster, group_members


class ScriptedAdmin:
    """Answers each ``describe_consumer_groups`` with the next scripted outcome."""

    def __init__(self, outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        self.calls = 0

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Future[Any]]:
        del request_timeout
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        future: Future[Any] = Future()
        if isinstance(outcome, int):
            future.set_exception(KafkaException(KafkaError(outcome)))
        else:
            future.set_result(outcome)
        return {groups[0]: future}


def _described(*partition_counts: int) -> SimpleNamespace:
    members = [SimpleNamespace(assignment=SimpleNamespace(topic_partitions=[0] * n)) for n in partition_counts]
    return SimpleNamespace(state=SimpleNamespace(name="STABLE"), members=members)


def test_asks_again_while_the_coordinator_is_not_there(monkeypatch: pytest.MonkeyPatch) -> None:
    client = ScriptedAdmin([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, _described(2, 1)])
    monkeypatch.setattr(cluster, "admin", lambda settings: client)
    assert group_members(KafkaSettings(), "g") == ("STABLE", [2, 1])
    assert client.calls == 3


def test_other_errors_and_a_coordinator_that_never_comes_raise_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "admin", lambda settings: ScriptedAdmin([KafkaError.GROUP_AUTHORIZATION_FAILED]))
    with pytest.raises(SourceError, match="cannot describe consumer group g"):
        group_members(KafkaSettings(), "g")
    monkeypatch.setattr(cluster, "admin", lambda settings: ScriptedAdmin([KafkaError.NOT_COORDINATOR]))
    with pytest.raises(SourceError, match="NOT_COORDINATOR"):
        group_members(KafkaSettings(), "g", timeout_s=0.5)
