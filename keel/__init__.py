"""Keel: durable agents and workspaces on Temporal."""
