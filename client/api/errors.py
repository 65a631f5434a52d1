"""Every error the HTTP API answers is Mastra's `{error, details?}` with a status that says whose fault it is:
4xx for the caller's (the client never retries those), 5xx only for ours (`@mastra/client-js` retries a 5xx,
POSTs included, so a caller error answered with a 5xx would be sent four times)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.service import RPCError, RPCStatusCode

from keel.app import AppError, UnknownAgent, UnknownTool
from keel.app.workflow_checks import InvalidDefinition
from keel.client.errors import (
    CallIdInUse,
    InvalidResumeData,
    InvalidRunInput,
    KeelClientError,
    MessageRefused,
    NoWorker,
    RunClosed,
    RunIdInUse,
    RunNotFound,
    ToolCallRejected,
    ToolFailed,
)
from keel.client.outages import TemporalUnavailable, is_away
from keel.client.workflows import ResumeRefused, WorkflowNotFound
from keel.storage.errors import StorageUnavailable

log = logging.getLogger("keel.api")


class ApiError(Exception):
    """An answer other than success: `status`, Mastra's `error` message, optional `details`."""

    def __init__(self, status: int, error: str, details: Any = None) -> None:
        super().__init__(error)
        self.status, self.error, self.details = status, error, details


def not_found(what: str) -> ApiError:
    return ApiError(404, what)


def bad_request(error: str, details: Any = None) -> ApiError:
    return ApiError(400, error, details)


STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (UnknownAgent, 404),
    (UnknownTool, 404),
    (WorkflowNotFound, 404),
    (RunNotFound, 404),
    (InvalidRunInput, 400),
    (InvalidDefinition, 400),
    (RunIdInUse, 409),
    (CallIdInUse, 409),
    (RunClosed, 409),
    (ToolCallRejected, 409),
    (MessageRefused, 409),
    (InvalidResumeData, 422),  # as a session's (`api/controllers.py`)
    (ResumeRefused, 409),
    (ToolFailed, 400),
    (NoWorker, 503),
    (AppError, 400),
    (KeelClientError, 400),
)


def body(error: str, details: Any = None) -> dict[str, Any]:
    return {"error": error} if details is None else {"error": error, "details": details}


INVALID_PARTS = {"query": "Invalid query parameters", "path": "Invalid path parameters"}
"""Mastra's messages for a request whose query or path does not validate (one of its body: "Invalid request
body")."""


def install(api: FastAPI) -> None:
    """Answer every failure as `{error, details?}`."""

    @api.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(body(err.error, err.details), status_code=err.status)

    @api.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        issues = [
            {"field": ".".join(str(p) for p in e.get("loc", ())[1:]) or "body", "message": e.get("msg", "")}
            for e in err.errors()
        ]
        kinds = {e.get("loc", ("",))[0] for e in err.errors()}
        message = "Invalid request body" if "body" in kinds else INVALID_PARTS.get(min(kinds), "Invalid request")
        return JSONResponse({**body(message, issues), "issues": issues}, status_code=400)

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(body(str(err.detail)), status_code=err.status_code)

    for kind, status in STATUS_OF:
        api.add_exception_handler(kind, _mapped(status))

    @api.exception_handler(RPCError)
    async def _temporal(request: Request, err: RPCError) -> JSONResponse:
        if is_away(err):  # the server, or the way to it, is away: worth asking again later
            return await _away(request, TemporalUnavailable(err))
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            return JSONResponse(body(err.message), status_code=409)
        return await _unexpected(request, err)

    @api.exception_handler(TemporalUnavailable)
    async def _away(request: Request, err: TemporalUnavailable) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, err)
        return JSONResponse(body(str(err)), status_code=503)

    @api.exception_handler(StorageUnavailable)
    async def _storage_away(request: Request, err: StorageUnavailable) -> JSONResponse:
        # the database is down, full or locked past its timeout: as with Temporal away, worth asking again later
        # (logged with its traceback: which call met the outage)
        log.warning("%s %s: %s", request.method, request.url.path, err, exc_info=err)
        return JSONResponse(body(str(err)), status_code=503)

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse(body(f"Internal error: {type(err).__name__}: {err}"), status_code=500)


def _mapped(status: int) -> Any:
    async def handler(request: Request, err: Exception) -> JSONResponse:
        details = None
        if isinstance(err, InvalidDefinition):
            details = [{"path": e.path, "message": e.message, "value": e.value} for e in err.errors]
        return JSONResponse(body(str(err), details), status_code=status)

    return handler
