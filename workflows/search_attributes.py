"""Keel's search attributes (all Keyword). Registered on the dev server by `temporal-dev/`; fixed contract."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

KEEL_KIND = SearchAttributeKey.for_keyword("KeelKind")
"""`agent` or `workflow`."""
KEEL_STATUS = SearchAttributeKey.for_keyword("KeelStatus")
"""`running` or `suspended` while open; `completed` or `failed` once the run ends on its own."""
KEEL_AGENT_ID = SearchAttributeKey.for_keyword("KeelAgentId")
KEEL_WORKFLOW_ID = SearchAttributeKey.for_keyword("KeelWorkflowId")
KEEL_RESOURCE_ID = SearchAttributeKey.for_keyword("KeelResourceId")
KEEL_THREAD_ID = SearchAttributeKey.for_keyword("KeelThreadId")

ALL_KEYS = (KEEL_KIND, KEEL_STATUS, KEEL_AGENT_ID, KEEL_WORKFLOW_ID, KEEL_RESOURCE_ID, KEEL_THREAD_ID)
