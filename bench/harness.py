"""What every bench needs: a free port, and a fresh dev server with a SQLite storage and a client on it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.local_service import free_port as free_port  # the tests import it from here
from keel.storage import SQLiteStorage


@dataclass(frozen=True)
class Stack:
    client: Client
    storage: SQLiteStorage
    tmp: Path
    server: DevServer


@asynccontextmanager
async def fresh_stack(prefix: str) -> AsyncIterator[Stack]:
    """A dev server of its own (free ports, state in a temp dir), an initialised storage and Keel's client;
    the server is stopped, the storage closed and the temp dir removed on leaving."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal")
    server = DevServer(cfg)
    storage = SQLiteStorage(tmp / "keel.db")
    try:
        await server.start(reuse=False)
        await storage.init()
        yield Stack(await connect(cfg.address, payloads=storage.payloads()), storage, tmp, server)
    finally:
        await storage.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
