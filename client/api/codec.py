"""Temporal's codec-server protocol, so the Temporal UI and `temporal ... --codec-endpoint` show the values Keel keeps
by reference: `POST /codec/decode` takes `{"payloads": [...]}` (protobuf JSON, as the UI and the CLI send them) and
answers them with every `keel-payloads` reference replaced by the value it stands for, cut to a readable size.

    temporal workflow result -w RUN --codec-endpoint http://127.0.0.1:4111/codec
    keel dev                        # starts the UI with this codec endpoint already set

A value over `READABLE_BYTES` keeps its shape: each string longer than `CUT_CHARS` is cut and says its full length,
each list longer than `CUT_ITEMS` says how many items it had. `POST /codec/encode` answers payloads unchanged (the
SDK stores large values itself when a client sends them). With API keys, both routes need one with `payloads:read`
(the CLI's `--codec-auth "Bearer <key>"`); the browser's preflight is answered for the UI's origins only.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request

CODEC_PREFIX = "/codec"
READABLE_BYTES = 64 * 1024
"""A decoded value up to this size is shown whole."""
CUT_CHARS = 2_000
CUT_ITEMS = 100

router = APIRouter(prefix=CODEC_PREFIX, tags=["codec"])


def _payloads(body: bytes) -> Payloads:
    try:
        return json_format.Parse(body or b"{}", Payloads(), ignore_unknown_fields=True)
    except json_format.ParseError as err:
        raise bad_request(f'The body must be {{"payloads": [...]}} in protobuf JSON: {err}') from None


def _answer(payloads: Sequence[Payload]) -> Response:
    body = json_format.MessageToJson(Payloads(payloads=payloads), indent=None)
    return Response(body, media_type="application/json")


def readable(value: Any) -> Any:
    """`value` with each long string and list cut, saying how long it was."""
    if isinstance(value, str) and len(value) > CUT_CHARS:
        return f"{value[:CUT_CHARS]}… [cut: {len(value):,} characters in full]"
    if isinstance(value, list):
        kept = [readable(v) for v in value[:CUT_ITEMS]]
        return kept + ([f"… [cut: {len(value):,} items in full]"] if len(value) > CUT_ITEMS else [])
    if isinstance(value, dict):
        return {k: readable(v) for k, v in value.items()}
    return value


def _cut(payload: Payload) -> Payload:
    if len(payload.data) <= READABLE_BYTES or payload.metadata.get("encoding") != b"json/plain":
        return payload
    try:
        value = json.loads(payload.data)
    except ValueError:
        return payload
    data = json.dumps(readable(value), ensure_ascii=False).encode()
    if len(data) > READABLE_BYTES:  # deep rather than long: the start of its text
        start = data[:READABLE_BYTES].decode(errors="ignore")
        data = json.dumps(f"{start}… [cut: {len(payload.data):,} bytes in full]", ensure_ascii=False).encode()
    return Payload(metadata=dict(payload.metadata), data=data)


@router.post("/decode")
async def decode(request: Request, ctx: Ctx) -> Response:
    payloads = list(_payloads(await request.body()).payloads)
    storage = ctx.keel.temporal.data_converter.external_storage
    if storage is not None:
        try:
            # The SDK's own reading of a reference (both encodings it has written), through Keel's driver.
            payloads = await storage._retrieve_payload_sequence(payloads)
        except Exception as err:  # a blob gone or the store down: say which, the UI shows the message
            raise ApiError(502, f"Could not read a stored payload: {err}") from None
    return _answer([_cut(p) for p in payloads])


@router.post("/encode")
async def encode(request: Request) -> Response:
    return _answer(list(_payloads(await request.body()).payloads))


def install_cors(api: FastAPI, origins: Sequence[str]) -> None:
    """CORS for the codec routes, for the Temporal UI's origins (the browser calls them from the UI's page)."""
    allowed = frozenset(o.rstrip("/") for o in origins)

    @api.middleware("http")
    async def codec_cors(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if not request.url.path.startswith(CODEC_PREFIX):
            return await call_next(request)
        origin = request.headers.get("origin", "")
        if request.method == "OPTIONS":
            response = Response(status_code=204 if origin in allowed else 403)
        else:
            response = await call_next(request)
        if origin in allowed:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Credentials"] = "true"
            response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = request.headers.get(
                "access-control-request-headers", "Content-Type, X-Namespace, Authorization"
            )
            response.headers["Vary"] = "Origin"
        return response
