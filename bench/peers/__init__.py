"""Keel against the durable agent peers on Temporal (pydantic-ai, the OpenAI Agents SDK). Standard library only
at import: the peers' drivers, in their own virtualenvs, import `bench.peers.shared` through this package."""
