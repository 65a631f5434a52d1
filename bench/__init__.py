"""Benchmarks: Keel's agent loop against a bare temporalio workflow (and, optionally, the real Mastra loop)."""
