"""``python -m replay``: re-drive selected dead letters to their source topic after a fix, exactly once.

Select by reason (``--reason invalid_json,too_large``), stage (``--stage gpu_stage``) and the DLQ
record's time (``--since``/``--until``, epoch ms or ISO-8601). Progress is the replay group's offset on
the DLQ, committed in the same transaction as the re-driven records: run it again with the same
``--group-id`` and it continues where it stopped; a new group id starts from the beginning of the DLQ.
``--dry-run`` reads and counts, writes nothing and commits no progress.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from llmpipe.dlq import Reason
from llmpipe.errors import ConfigError, PipelineError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.runtime import configure_logging, logging_spec
from llmpipe.settings import (
    Bounded,
    Checked,
    check_kafka_options,
    env_option,
    non_empty,
    parse_args,
    positive_float,
    topic_name,
)
from replay.replayer import Outcome, Replayer, ReplaySettings
from replay.selection import Selection, parse_time

STAGES = ("connector", "gpu_stage")
"""The stages that write dead letters (their ``__dlq.stage`` header)."""
MAX_BATCH_RECORDS = 1_000_000
"""The most records one consume call of the Kafka client returns."""


def _names(known: tuple[str, ...]) -> Checked[str]:
    """A comma-separated list of some of ``known`` (empty: any): a misspelt name would select nothing."""

    def check(text: str) -> str:
        unknown = [name for name in (part.strip() for part in text.split(",")) if name and name not in known]
        if unknown:
            msg = f"unknown: {', '.join(unknown)}"
            raise ValueError(msg)
        return text

    return Checked(f"a comma-separated list of {', '.join(known)} (empty: any)", check)


def _moment(text: str) -> str:
    try:
        parse_time(text)
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc
    return text


moment = Checked("epoch ms or an ISO-8601 time", _moment)
batch_records = Bounded(int, 1, MAX_BATCH_RECORDS)


def parser() -> argparse.ArgumentParser:
    """Options; each falls back to a ``REPLAY_*`` environment variable."""
    p = argparse.ArgumentParser(prog="python -m replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    KafkaSettings.add_options(p, "REPLAY")
    env_option(p, "--dlq-topic", "REPLAY_DLQ_TOPIC", default="llm.dlq", type=topic_name,
               help="dead-letter topic to read")
    env_option(p, "--reason", "REPLAY_REASONS", default="", type=_names(tuple(Reason)),
               help="reason codes to replay, comma-separated (any)")
    env_option(p, "--stage", "REPLAY_STAGES", default="", type=_names(STAGES),
               help="stages to replay: connector, gpu_stage (any)")
    env_option(p, "--since", "REPLAY_SINCE", type=moment,
               help="DLQ records at or after this time (epoch ms or ISO-8601)")
    env_option(p, "--until", "REPLAY_UNTIL", type=moment, help="DLQ records before this time (epoch ms or ISO-8601)")
    env_option(p, "--target-topic", "REPLAY_TARGET_TOPIC", type=topic_name,
               help="send everything here instead of each record's __connect.errors.topic")
    env_option(p, "--group-id", "REPLAY_GROUP_ID", default="llmpipe-replay", type=non_empty,
               help="consumer group whose DLQ offsets record the replay's progress")
    env_option(p, "--transactional-id", "REPLAY_TRANSACTIONAL_ID", default="llmpipe-replay-0", type=non_empty,
               help="stable id: a second replay with the same id fences the first")
    env_option(p, "--batch-records", "REPLAY_BATCH_RECORDS", default=500, type=batch_records,
               help=f"records per transaction (1-{MAX_BATCH_RECORDS})")
    env_option(p, "--max-records-per-s", "REPLAY_MAX_RECORDS_PER_S", type=positive_float,
               help="rate limit (> 0), so a large replay does not swamp the stage it feeds; unset: none")
    env_option(p, "--dry-run", "REPLAY_DRY_RUN", default=False, action="store_true",
               help="count what would be replayed; write nothing, commit no progress")
    env_option(p, "--log-level", "REPLAY_LOG_LEVEL", default="INFO", type=logging_spec,
               help="logging level, then any logger=LEVEL")
    return p


def settings_from(args: argparse.Namespace) -> ReplaySettings:
    """The frozen settings of one run (each value was checked as it was parsed)."""
    check_kafka_options(args)
    selection = Selection.build([args.reason], [args.stage], args.since, args.until, args.target_topic)
    if selection.since_ms is not None and selection.until_ms is not None and selection.since_ms >= selection.until_ms:
        msg = f"--since ({args.since}) must be before --until ({args.until}): nothing could be selected"
        raise ConfigError(msg)
    return ReplaySettings(KafkaSettings.from_args(args), args.dlq_topic, args.group_id, args.transactional_id,
                          selection, args.dry_run, args.batch_records, args.max_records_per_s)


def report(outcome: Outcome, dry_run: bool) -> str:
    """A short account of the run."""
    verb = "would replay" if dry_run else "replayed"
    lines = [f"read {outcome.read} dead letters; {verb} {outcome.total_replayed}; "
             f"not selected {outcome.skipped}; no source topic {outcome.unroutable}"]
    lines += [f"  {target:<30} {reason:<18} {n}" for (target, reason), n in sorted(outcome.replayed.items())]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one replay; the exit code says how it ended.

    0 success; 2 bad options, refused credentials or a missing topic (one line); 1 a Kafka failure,
    an unreachable cluster included (nothing uncommitted is visible).
    """
    try:
        args = parse_args(parser(), argv)
        settings = settings_from(args)
    except ConfigError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    try:
        outcome = Replayer(settings).run()
    except ConfigError as exc:
        logging.getLogger("replay").error("replay: %s", exc)
        return 2
    except PipelineError as exc:
        logging.getLogger("replay").error("replay stopped: %s", exc)
        return 1
    print(report(outcome, settings.dry_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
