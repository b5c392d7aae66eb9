"""Local stack without Docker: a single-node KRaft Kafka broker and the Flink jars, from Maven Central."""
