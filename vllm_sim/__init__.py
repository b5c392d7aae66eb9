"""A vLLM-compatible HTTP server for tests, demos and benchmarks.

It speaks the OpenAI-compatible routes vLLM serves, with bodies shaped as vLLM writes them, a latency
model and fault injection, all deterministic under a seed so a failing test can be replayed exactly.
Real vLLM replaces it in production; nothing in the pipeline imports it.
"""
