"""gpu_stage: raw vLLM bodies from ``llm.raw`` to typed Avro records, parsed in batches.

The transform (:mod:`gpu_stage.transform`) is pure: it never imports a Kafka client, so it is
tested and benchmarked on plain bytes. The worker (:mod:`gpu_stage.worker`) is the Kafka side.
"""
