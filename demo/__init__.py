"""``python -m demo``: the whole product on one machine, end to end, with a checked summary.

The demo is a user of the product, not part of it: it starts the same commands a deployment runs
(local broker, vLLM simulator or a real vLLM, connector, gpu_stage, one Flink job), watches the topics
the way a downstream consumer would (``read_committed``), and checks the results independently.
"""
