"""A local workspace whose disk fills up mid-run: the write is retried until space comes back (the model is not
told of a failure that was only a full disk), lands whole, and leaves no temporary file. On a real tmpfs of
256 KiB, mounted here (it needs root; skipped where mounting is not allowed)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from temporalio.client import Client

from keel.app import App
from keel.storage import Storage
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, Workspace
from tests.conftest import running_worker
from tests.workspace.apps import plan_agent

FS = WORKSPACE_TOOLS.FILESYSTEM


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """A file that takes every free byte of `disk`."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


async def test_a_write_to_a_full_disk_waits_for_space_and_lands_once_whole(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "disk", "256k") as disk:
        ws = Workspace(id="small-disk", filesystem=LocalFilesystem(disk / "ws"))
        content = "x" * (64 * 1024)
        plan = [[[FS.WRITE_FILE, {"path": "big.txt", "content": content}]]]
        async with running_worker(client, App.of(plan_agent("writer", ws)), storage, task_queue) as keel:
            (disk / "ws").mkdir()
            filler = fill(disk)
            run_id = await keel.start_run("writer", json.dumps(plan))
            await asyncio.sleep(4)  # the write has met the full disk, at least once
            assert not (disk / "ws" / "big.txt").exists()
            assert (await keel.describe(run_id)).status == "running"
            filler.unlink()
            result = await asyncio.wait_for(keel.result(run_id), 90)
        assert json.loads(result.text) == ["Wrote 65536 bytes to big.txt"]
        assert (disk / "ws" / "big.txt").read_text() == content
        assert os.listdir(disk / "ws") == ["big.txt"]
