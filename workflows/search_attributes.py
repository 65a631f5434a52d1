"""Keel's search attribute keys (all Keyword), typed for the Temporal SDK; the names are `keel.protocol.names`.
Registered on the dev server by `temporal-dev/`; fixed contract."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

from keel.protocol import names

KEEL_KIND = SearchAttributeKey.for_keyword(names.KEEL_KIND)
KEEL_STATUS = SearchAttributeKey.for_keyword(names.KEEL_STATUS)
KEEL_AGENT_ID = SearchAttributeKey.for_keyword(names.KEEL_AGENT_ID)
KEEL_WORKFLOW_ID = SearchAttributeKey.for_keyword(names.KEEL_WORKFLOW_ID)
KEEL_RESOURCE_ID = SearchAttributeKey.for_keyword(names.KEEL_RESOURCE_ID)
KEEL_THREAD_ID = SearchAttributeKey.for_keyword(names.KEEL_THREAD_ID)
KEEL_CONTROLLER_ID = SearchAttributeKey.for_keyword(names.KEEL_CONTROLLER_ID)

ALL_KEYS = (
    KEEL_KIND,
    KEEL_STATUS,
    KEEL_AGENT_ID,
    KEEL_WORKFLOW_ID,
    KEEL_RESOURCE_ID,
    KEEL_THREAD_ID,
    KEEL_CONTROLLER_ID,
)
