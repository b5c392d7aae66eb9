"""gpu_stage: raw vLLM bodies from ``llm.raw`` to typed Avro records, parsed in batches.

The transform (:mod:`gpu_stage.batch`, :mod:`gpu_stage.backends`, :mod:`gpu_stage.avro_bulk`) is pure:
it never imports a Kafka client, so it can be tested and benchmarked on plain bytes.
"""
