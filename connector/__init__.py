"""HTTP source connector: requests (Kafka topic or JSONL) → vLLM → ``llm.raw`` / ``llm.dlq``, exactly once."""
