"""One exception root for the whole project.

Third-party errors are re-raised as one of these, chained ``from`` the cause, so callers catch
``PipelineError`` and never a library's private exception type.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(PipelineError):
    """Settings are missing, inconsistent, or name something that is not there (e.g. no GPU)."""


class SourceError(PipelineError):
    """An input (Kafka topic, JSONL file, HTTP endpoint) could not be read."""


class ParseError(PipelineError):
    """A batch could not be parsed as a whole (per-record problems become dead letters instead)."""


class SerializationError(PipelineError):
    """A typed row could not be encoded to the declared Avro schema."""


class DeliveryError(PipelineError):
    """Kafka did not confirm delivery of a produced record, or a transaction failed."""


class FencedError(DeliveryError):
    """Another instance took over our transactional id: this process must stop."""
