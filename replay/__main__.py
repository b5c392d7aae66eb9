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

from llmpipe.errors import PipelineError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.runtime import configure_logging
from llmpipe.settings import env_option, parse_args
from replay.replayer import Outcome, Replayer, ReplaySettings
from replay.selection import Selection


def parser() -> argparse.ArgumentParser:
    """Options; each falls back to a ``REPLAY_*`` environment variable."""
    p = argparse.ArgumentParser(prog="python -m replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    KafkaSettings.add_options(p, "REPLAY")
    env_option(p, "--dlq-topic", "REPLAY_DLQ_TOPIC", default="llm.dlq", help="dead-letter topic to read")
    env_option(p, "--reason", "REPLAY_REASONS", default="", help="reason codes to replay, comma-separated (any)")
    env_option(p, "--stage", "REPLAY_STAGES", default="", help="stages to replay: connector, gpu_stage (any)")
    env_option(p, "--since", "REPLAY_SINCE", help="DLQ records at or after this time (epoch ms or ISO-8601)")
    env_option(p, "--until", "REPLAY_UNTIL", help="DLQ records before this time (epoch ms or ISO-8601)")
    env_option(p, "--target-topic", "REPLAY_TARGET_TOPIC",
               help="send everything here instead of each record's __connect.errors.topic")
    env_option(p, "--group-id", "REPLAY_GROUP_ID", default="llmpipe-replay",
               help="consumer group whose DLQ offsets record the replay's progress")
    env_option(p, "--transactional-id", "REPLAY_TRANSACTIONAL_ID", default="llmpipe-replay-0",
               help="stable id: a second replay with the same id fences the first")
    env_option(p, "--batch-records", "REPLAY_BATCH_RECORDS", default=500, type=int, help="records per transaction")
    env_option(p, "--max-records-per-s", "REPLAY_MAX_RECORDS_PER_S", type=float,
               help="rate limit, so a large replay does not swamp the stage it feeds")
    env_option(p, "--dry-run", "REPLAY_DRY_RUN", default=False, action="store_true",
               help="count what would be replayed; write nothing, commit no progress")
    env_option(p, "--log-level", "REPLAY_LOG_LEVEL", default="INFO", help="logging level")
    return p


def settings_from(args: argparse.Namespace) -> ReplaySettings:
    """The frozen settings of one run."""
    selection = Selection.build([args.reason], [args.stage], args.since, args.until, args.target_topic)
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
    """Exit 0 on success, 2 on bad options, 1 on a Kafka failure (nothing uncommitted is visible)."""
    args = parse_args(parser(), argv)
    configure_logging(args.log_level)
    try:
        settings = settings_from(args)
    except PipelineError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    try:
        outcome = Replayer(settings).run()
    except PipelineError as exc:
        logging.getLogger("replay").error("replay stopped: %s", exc)
        return 1
    print(report(outcome, settings.dry_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
