"""What Temporal takes as an id or an indexed value, checked before Keel hands one over.

By default Temporal refuses a workflow id longer than 1,000 bytes (its `limit.maxIDLength`) and a search attribute
value longer than 2 KB (`limit.searchAttributeValueSize`, counted on the value as the SDK encodes it: JSON, with
every non-ASCII character escaped, so `é` takes 6 bytes and an emoji 12). Keel indexes a run's thread and resource
ids (`KeelThreadId`, `KeelResourceId`; a run without a thread is indexed under its run id) and derives the ids of
sessions and their turns from theirs. An id past either bound is refused with its name before anything starts:
left to Temporal, the start fails with an RPC error, or the server terminates a run whose own upsert it refuses.
"""

from __future__ import annotations

import json
from typing import Final

MAX_WORKFLOW_ID_BYTES: Final = 1000
"""Temporal's default bound on a workflow id, in bytes of UTF-8."""
MAX_ATTRIBUTE_BYTES: Final = 2048
"""Temporal's default bound on a search attribute value, in bytes of the JSON the SDK sends."""
SESSION_ID_ROOM: Final = 20
"""What a session's id leaves for its turns' ids (`<session id>-turn-N`). A subagent's run id adds the step and
the model's call id to its turn's: one past the bound is answered with an error for the model."""
MAX_STEP_ID_BYTES: Final = 128
"""A workflow definition's step and schedule ids: each is part of run ids (`<run id>-<step id>-N`,
`keel-<definition id>-<schedule id>-run-<time>`)."""
DEFINITION_CHILD_ROOM: Final = 150
"""What a workflow run's id leaves for its steps' child runs' ids: `-<step id>-N` and, after a time travel, `-tN`."""
DEFINITION_ID_ROOM: Final = 5 + 1 + MAX_STEP_ID_BYTES + 4 + 26 + DEFINITION_CHILD_ROOM
"""What a definition's id leaves in its runs' ids: the longest is a scheduled run's,
`keel-<id>-<schedule id>-run-<time>`, with its children's suffixes."""


def attribute_bytes(value: str) -> int:
    """The bytes Temporal counts for `value` as a Keyword search attribute (the SDK's JSON, ASCII only)."""
    return len(json.dumps(value))


def nul_problem(what: str, value: str) -> str | None:
    """Why `value` cannot be looked up in Temporal's visibility (a NUL character, which no query can hold), or
    None. Temporal itself takes it; Keel's doors refuse it, since its runs are listed and found by such queries."""
    return f"{what} holds a NUL character, which no Temporal visibility query can look up" if "\x00" in value else None


def attribute_problem(what: str, value: str) -> str | None:
    """Why `value` cannot be indexed as a search attribute, or looked up by it (`nul_problem`), or None."""
    if problem := nul_problem(what, value):
        return problem
    size = attribute_bytes(value)
    if size <= MAX_ATTRIBUTE_BYTES:
        return None
    return (
        f"{what} is indexed by Temporal as a search attribute, at most {MAX_ATTRIBUTE_BYTES} bytes as JSON "
        f"(non-ASCII characters escaped): this one takes {size}"
    )


def run_ids_problem(thread_id: str | None, resource_id: str | None) -> str | None:
    """Why a run cannot be indexed by its thread and resource ids (`KeelThreadId`, `KeelResourceId`), or None."""
    for field, what, value in (("threadId", "a thread id", thread_id), ("resourceId", "a resource id", resource_id)):
        problem = None if value is None else attribute_problem(what, value)
        if problem is not None:
            return f"{field}: {problem}"
    return None


def workflow_id_problem(what: str, workflow_id: str, *, room: int = 0, kind: str = "a workflow") -> str | None:
    """Why `workflow_id` (with `room` bytes to spare for ids derived from it) cannot be a workflow id (or, with
    `kind="an update"`, an update id: the same bound), or None."""
    size = len(workflow_id.encode("utf-8", "surrogatepass"))
    if size + room <= MAX_WORKFLOW_ID_BYTES:
        return None
    spare = f" ({room} of them kept for the ids derived from it)" if room else ""
    return f"{what} would give {kind} id of {size} bytes; Temporal takes at most {MAX_WORKFLOW_ID_BYTES} bytes{spare}"


MAX_TITLE_CHARS: Final = 4096
"""The most a thread's title may hold: it is in a session's snapshot and thread events, and in storage."""


def title_problem(title: str | None) -> str | None:
    """Why a thread may not have `title`, or None."""
    if title is not None and len(title) > MAX_TITLE_CHARS:
        return f"A thread title holds at most {MAX_TITLE_CHARS} characters: this one has {len(title)}"
    return None
