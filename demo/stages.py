"""The command lines of the product's stages, as the demo starts them (the same commands a deployment runs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmpipe.record import TypedRecord

# A realistic serving mix for the simulator: some latency, a few rate limits and server errors that the
# connector retries, and a few 400s that become dead letters.
SIM_FAULTS = ("--ttft-ms", "40", "--per-token-ms", "1.5", "--jitter", "0.5", "--rate-429", "0.01",
              "--rate-503", "0.01", "--rate-500", "0.005", "--rate-400", "0.002", "--rate-reset", "0.002",
              "--rate-truncate", "0.002", "--retry-after-s", "0.2")


@dataclass(frozen=True)
class RunNames:
    """Topic names, groups and transactional ids of one run (suffixed on a shared broker)."""

    suffix: str
    typed: str
    """The typed topic gpu_stage writes: the base name plus the schema version it appends."""

    @classmethod
    def make(cls, suffix: str, record: TypedRecord) -> RunNames:
        """Names for a run; ``suffix`` is empty on the demo's own fresh broker."""
        return cls(suffix, record.versioned_topic(f"llm.typed{suffix}"))

    @property
    def raw(self) -> str:
        """Raw bodies."""
        return f"llm.raw{self.suffix}"

    @property
    def typed_base(self) -> str:
        """What gpu_stage takes as ``--typed-topic`` (it appends the fingerprint)."""
        return f"llm.typed{self.suffix}"

    @property
    def dlq(self) -> str:
        """Dead letters of every stage."""
        return f"llm.dlq{self.suffix}"

    @property
    def features(self) -> str:
        """Feature rows."""
        return f"llm.features{self.suffix}"

    @property
    def state(self) -> str:
        """The connector's file positions."""
        return f"llm.connector.state{self.suffix}"


def simulator(seed: int) -> list[str]:
    """``python -m vllm_sim`` on a free port (it prints ``READY <url>``)."""
    return ["-m", "vllm_sim", "--port", "0", "--seed", str(seed), *SIM_FAULTS]


def connector(bootstrap: str, names: RunNames, prompts: Path, url: str, metrics_port: int) -> list[str]:
    """``python -m connector`` over the prompt file."""
    return ["-m", "connector", "--bootstrap", bootstrap, "--input-file", str(prompts), "--url", url,
            "--raw-topic", names.raw, "--dlq-topic", names.dlq, "--state-topic", names.state,
            "--transactional-id", f"demo-connector{names.suffix}", "--metrics-port", str(metrics_port),
            "--max-in-flight", "128", "--backoff-base-s", "0.1", "--backoff-max-s", "1"]


def gpu_stage(bootstrap: str, names: RunNames, backend: str, metrics_port: int) -> list[str]:
    """``python -m gpu_stage``, running until the demo stops it with SIGTERM."""
    return ["-m", "gpu_stage", "--bootstrap", bootstrap, "--raw-topic", names.raw,
            "--typed-topic", names.typed_base, "--dlq-topic", names.dlq, "--group-id", f"demo-gpu-stage{names.suffix}",
            "--transactional-id", f"demo-gpu-stage{names.suffix}-0", "--backend", backend,
            "--metrics-port", str(metrics_port), "--batch-wait-ms", "100"]


def model_minute(bootstrap: str, names: RunNames) -> list[str]:
    """``python -m jobs.model_minute``, bounded: reads the typed topic to its current end, then ends."""
    return ["-m", "jobs.model_minute", "--bootstrap", bootstrap, "--typed-topic", names.typed,
            "--from", "earliest", "--until", "latest", "--features-topic", names.features,
            "--group-id", f"demo-model-minute{names.suffix}", "--checkpoint-interval-ms", "0"]
