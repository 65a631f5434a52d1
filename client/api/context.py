"""What every route works with: the app, Keel's Temporal client and the storage read models. Nothing about a
run is kept here: restart the API at any time."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Query, Request

from keel.app import App
from keel.client.api.errors import bad_request
from keel.client.keel_client import KeelClient
from keel.client.workflows import Workflows
from keel.storage import Storage


@dataclass
class ApiContext:
    app: App
    keel: KeelClient
    storage: Storage
    workflows: Workflows = field(init=False)

    def __post_init__(self) -> None:
        self.workflows = Workflows(self.storage, self.app, self.keel)


def _context(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.keel
    return context


Ctx = Annotated[ApiContext, Depends(_context)]


def _request_context(requestContext: Annotated[str | None, Query()] = None) -> dict[str, Any] | None:
    """GETs carry the request context as `?requestContext=<base64 of its JSON>` (the client's `btoa`)."""
    if not requestContext:
        return None
    try:
        value = json.loads(base64.b64decode(requestContext + "=" * (-len(requestContext) % 4)).decode())
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad_request("requestContext must be base64 of a JSON object") from None
    if not isinstance(value, dict):
        raise bad_request("requestContext must be base64 of a JSON object")
    return value


QueryContext = Annotated[dict[str, Any] | None, Depends(_request_context)]
