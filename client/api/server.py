"""Serving the HTTP API in this process (uvicorn), under the caller's control: it starts, says where, and stops
when asked, without taking over the process's signals (`keel dev` runs it beside a worker)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Generator

import uvicorn
from fastapi import FastAPI

GRACE_SECONDS = 3
"""On stopping, requests still open after this long (streams, subscriptions) are cut off."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the caller handles Ctrl-C and stops the server with `should_exit`


@contextlib.asynccontextmanager
async def serving(api: FastAPI, host: str, port: int) -> AsyncIterator[str]:
    """Serve `api` on host:port while inside; yields its base URL once it accepts connections."""
    config = uvicorn.Config(
        api,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=GRACE_SECONDS,  # an open subscription never ends by itself
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it (the port is taken, ...)
                raise OSError(f"The HTTP API could not start on {host}:{port}")
            await asyncio.sleep(0.02)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await task
