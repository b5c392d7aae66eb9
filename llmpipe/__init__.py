"""Shared pieces of the pipeline: errors, settings helpers, Kafka adapter, DLQ envelope, record schema.

Every stage (connector, gpu_stage, jobs) imports from here; stages never import each other, because
they run in different environments (the Flink jobs have no cuDF, the GPU stage has no Flink).
"""
