"""Workspace providers (filesystem, sandbox, search, skills, LSP) and the Workspace: plain async Python with no
Temporal import. Not built yet: the agent loop's spine comes first (see README.md, Layout)."""

__all__: list[str] = []
