"""What a run's history shows of how its steps ran: for tests that check a run's shape."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory


def local_activities_per_task(history: WorkflowHistory) -> list[int]:
    """The local activities (`core_local_activity` markers) each workflow task completion recorded, in order;
    the first entry counts those before the first completion (always 0)."""
    per_task, current = [], 0
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            per_task.append(current)
            current = 0
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            current += e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    return [*per_task, current]


def patches_after_first_local_step(history: WorkflowHistory) -> list[str]:
    """The ids of the `workflow.patched` markers a run recorded after its first local activity's marker."""
    ids: list[str] = []
    seen_local = False
    for e in history.events:
        if e.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        marker = e.marker_recorded_event_attributes
        if marker.marker_name == "core_local_activity":
            seen_local = True
        elif marker.marker_name == "core_patch" and seen_local:
            ids.append(json.loads(marker.details["patch-data"].payloads[0].data)["id"])
    return ids
