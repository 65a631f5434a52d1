"""The payload size both sides agree on: the client's payload store keeps a payload of this size or more and
sends a reference, and the workflows count such a payload as its reference when they bound what one workflow
task sends (`keel.workflows.task_budget`)."""

from __future__ import annotations

import json
from typing import Any

PAYLOAD_SIZE_THRESHOLD = 256 * 1024
"""Payloads of this size or more are stored by reference (the Temporal SDK's default, well under the 2 MB limit)."""
LOCAL_STEP_RESULT_THRESHOLD = 2 * 1024
"""A definition run's local tool steps store results of this size or more by reference too. Their markers are in
the completion of the workflow task that ran them, which Temporal refuses over 4 MiB, and one task can run many:
each activity that ends in it lets the next step run locally, and 500 may be in flight (`MAX_IN_FLIGHT`). 504
markers of under 2.3 KB (a result under 2 KiB, or a reference, and the marker's own fields) are 1.2 MB, beside the
2 MiB of inputs a task may start (`TASK_INPUT_BYTES`)."""


def json_bytes(value: Any) -> int:
    """`value`'s size as UTF-8 JSON, as the data converter writes it (a lone surrogate, which JSON may carry,
    counted as 3 bytes rather than failing)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode(errors="surrogatepass"))
