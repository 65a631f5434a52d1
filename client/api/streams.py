"""The two stream formats of Mastra's server, fed from Temporal and the event log (the API keeps nothing):

- agent streams: Server-Sent Events, `data: <chunk JSON>\\n\\n` per chunk, ending with `data: [DONE]\\n\\n`; the
  chunks are the run's event log from an offset (a client that reconnects with an offset gets the rest once);
- workflow streams: `<event JSON>\\x1e` records, the run's `events` query from an offset, until it finishes or
  suspends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, TypeVar

from fastapi.responses import StreamingResponse
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle, WorkflowQueryFailedError

from keel.client.keel_client import KeelClient
from keel.client.run_events import POLL_SECONDS, WATCHED_WAIT_SECONDS, Shown, follow, read
from keel.client.visibility import quoted
from keel.protocol import names
from keel.storage import Storage

SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
WORKFLOW_POLL_SECONDS = 0.05


def chunk_json(shown: Shown) -> dict[str, Any]:
    chunk = shown.event.chunk()
    if chunk is not None:
        dumped: dict[str, Any] = chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
    return {"type": shown.event.type, "runId": shown.event.run_id, "from": "AGENT", "payload": shown.event.payload}


async def agent_chunks(
    keel: KeelClient, storage: Storage, run_id: str, offset: int = 0, *, skip: int = 0, start: Any = None
) -> AsyncGenerator[Any, None]:
    """The run's chunks from log `offset` until it ends or waits for an approval (every approval chunk of that
    step is included); an `error` chunk if it ended without finishing. `skip` leaves out the first chunks
    shown: what a client that counted them has already seen (a superseded attempt's chunks are not shown, so
    a count of chunks is not a log offset). A `finish` ends the stream only once the run has ended: a message
    delivered into a run that had just answered makes it go on (more steps, another `finish`). `start`: the
    run's `start` chunk, sent first, before the run has written it (the log's is then left out)."""

    async def quiet() -> bool:  # nothing new for a while: the stream ends unless the run is still working
        return (await keel.describe(run_id)).status != "running"

    last = None
    if start is not None:
        yield start
    while True:
        async for shown in follow(storage, run_id, offset=offset, until=frozenset({"finish"}), idle_check=quiet):
            last = shown
            offset = shown.event.offset + 1
            if start is not None and shown.event.type == "start":
                announced, start = start, None
                if chunk_json(shown) == announced:
                    continue  # the one sent first (a message delivered before the first step numbers it anew)
            if skip > 0:
                skip -= 1
                continue
            yield chunk_json(shown)
            if shown.event.type == "tool-call-approval":
                break
        if last is None or last.event.type != "finish":
            break
        if not await _goes_on_after_finish(keel, storage, run_id, offset):
            return
    if last is not None and last.event.type == "tool-call-approval" and skip == 0:
        # The step's other approvals, written in the same transaction.
        for more in await read(storage, run_id, offset=last.event.offset + 1):
            if more.event.type == "tool-call-approval":
                yield chunk_json(more)
        return
    if last is None or last.event.type != "tool-call-approval":
        info = await keel.describe(run_id)
        if info.status not in ("running", "suspended"):
            message = f"Run {run_id} ended {info.status}"
            yield {"type": "error", "runId": run_id, "from": "AGENT", "payload": {"error": {"message": message}}}


async def _goes_on_after_finish(keel: KeelClient, storage: Storage, run_id: str, offset: int) -> bool:
    """After a `finish`: True once the run writes more (it took a delivered message), False once it has ended.
    Woken by the log's watch and by the run closing (a long poll on its result), never by polling Temporal."""
    wait = WATCHED_WAIT_SECONDS if storage.wakes_readers else POLL_SECONDS
    closed = asyncio.ensure_future(_closed(keel, run_id))
    try:
        async with storage.watch_events(run_id) as watch:
            while True:
                if await storage.read_events(run_id, offset=offset, limit=1):
                    return True
                if closed.done():
                    if closed.result() or (await keel.describe(run_id)).status not in ("running", "suspended"):
                        return bool(await storage.read_events(run_id, offset=offset, limit=1))
                    closed = asyncio.ensure_future(_closed(keel, run_id))  # the long poll failed: again
                woken = asyncio.ensure_future(watch.wait(wait))
                await asyncio.wait({closed, woken}, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
    finally:
        closed.cancel()


async def _closed(keel: KeelClient, run_id: str) -> bool:
    """Once the run has closed, however it ended: True; False if the long poll itself failed (ask again)."""
    try:
        await keel.temporal.get_workflow_handle(run_id).result()
    except WorkflowFailureError:  # failed, cancelled, terminated or timed out: closed all the same
        return True
    except Exception:
        return False
    return True


async def thread_chunks(
    keel: KeelClient, storage: Storage, agent_id: str, thread_id: str, *, skip: int = 0
) -> AsyncGenerator[Any, None]:
    """Every chunk of the agent's runs on the thread, oldest run first, then each new run's as it comes: a
    subscription that does not end (the client unsubscribes). `skip` leaves out the first chunks, counted as
    the subscription shows them (a subscriber that reconnects gives how many it has). Each run is followed
    from the log offset after the last chunk passed on, so a retried step cannot shift what is shown.

    The runs that started before come from visibility; each run that starts later announces itself on the
    thread's run log (its first step writes a `run-start` event there, `keel.workflows.thread_run_log`), whose
    watch wakes the subscription at once, in this process or another. Visibility is asked again every
    `THREAD_LIST_SECONDS` while idle, for runs of workers that do not announce them."""
    query = (
        f"WorkflowType='{names.AGENT_RUN}' AND KeelAgentId='{quoted(agent_id)}' AND KeelThreadId='{quoted(thread_id)}'"
    )
    log = names.thread_run_log(agent_id, thread_id)
    offsets: dict[str, int] = {}  # each run's next log offset to read
    runs: list[str] = []  # in the order they started
    ended: set[str] = set()
    log_offset = 0
    listed_at = -float("inf")
    async with storage.watch_events(log) as announced:
        while True:
            for event in await storage.read_events(log, offset=log_offset):
                log_offset = event.offset + 1
                run_id = event.payload.get("runId")
                if isinstance(run_id, str) and run_id not in runs:
                    runs.append(run_id)
            open_runs = [r for r in runs if r not in ended]
            if not open_runs and time.monotonic() - listed_at >= THREAD_LIST_SECONDS:
                listed = sorted([e async for e in keel.temporal.list_workflows(query)], key=lambda e: e.start_time)
                runs[:0] = [e.id for e in listed if e.id not in runs]  # older than any announced since
                listed_at = time.monotonic()
                open_runs = [r for r in runs if r not in ended]
            if not open_runs:
                await announced.wait(THREAD_LIST_SECONDS)
                continue
            for run_id in open_runs:
                finished = False
                async for shown in follow(
                    storage,
                    run_id,
                    offset=offsets.get(run_id, 0),
                    until=frozenset({"finish"}),
                    idle_check=_not_running(keel, run_id),
                ):
                    offsets[run_id] = shown.event.offset + 1
                    finished = shown.event.type == "finish"
                    if skip > 0:
                        skip -= 1
                        continue
                    yield chunk_json(shown)
                if finished:  # it ends now, or goes on with a message delivered after its answer
                    if not await _goes_on_after_finish(keel, storage, run_id, offsets[run_id]):
                        ended.add(run_id)
                elif (await keel.describe(run_id)).status not in ("running", "suspended"):
                    ended.add(run_id)


def _not_running(keel: KeelClient, run_id: str) -> Any:
    async def check() -> bool:
        return (await keel.describe(run_id)).status != "running"

    return check


THREAD_LIST_SECONDS = 2.0
T = TypeVar("T")


async def idle_marked(items: AsyncIterator[T], every: float | None) -> AsyncGenerator[T | None, None]:
    """`items`, with a None each time nothing came for `every` seconds (a stream's cue for a comment frame, so a
    long-lived subscription notices a client that went away). Closing this closes `items`."""
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending}, timeout=every)
            if not done:
                yield None
                continue
            finished, pending = pending, None
            try:
                yield finished.result()
            except StopAsyncIteration:
                return
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        close = getattr(items, "aclose", None)  # a generator: ends its log's follow, releasing the watch
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


def sse(chunks: AsyncGenerator[Any, None], *, keep_alive: float | None = None) -> StreamingResponse:
    """`keep_alive`: a comment frame (ignored by the client) when nothing was sent for that long."""

    async def frames() -> AsyncIterator[bytes]:
        async with contextlib.aclosing(idle_marked(chunks, keep_alive)) as marked:
            async for chunk in marked:
                if chunk is None:
                    yield b": keep-alive\n\n"
                else:
                    yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream", headers=SSE_HEADERS)


async def log_end(storage: Storage, run_id: str) -> int:
    """The offset just past the run's last event (where a stream of what happens next starts)."""
    return await storage.log_end(run_id)


# --- workflow runs ----------------------------------------------------------------------------------------


UNREADABLE_ENDS = {
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TERMINATED: "failed",
    WorkflowExecutionStatus.TIMED_OUT: "failed",
    WorkflowExecutionStatus.CANCELED: "canceled",
}
"""How a run that ended may have no state a query can read, and the `workflowStatus` its finish then says. A
run that succeeded always has one; when no worker answers for a run now (an `RPCError`), its stream is cut and
read again."""


async def workflow_events(
    handle: WorkflowHandle[Any, Any], offset: int = 0, *, through_suspensions: bool = False
) -> AsyncIterator[dict[str, Any]]:
    """The run's `workflow-*` events from `offset` until a `workflow-finish` (it ended or suspended), or with
    `through_suspensions` (`observe`: the whole run) until one that no event follows yet; from past the end of
    a run that ended, its finish again, and from its end, nothing."""
    idle = 0
    while True:
        try:
            events: list[dict[str, Any]] = await handle.query(names.EVENTS_QUERY, offset, result_type=list)
        except WorkflowQueryFailedError as err:  # a worker answered, with the query's failure
            status = (await handle.describe()).status
            if status not in UNREADABLE_ENDS:  # an ended run with a stale worker cache: read again later
                raise
            # A run that ended failed with no state to read (its code cannot replay its history): how it ended.
            message = str(err)
            try:
                await handle.result()
            except WorkflowFailureError as failed:
                message = str(failed.cause or failed)
            payload = {"workflowStatus": UNREADABLE_ENDS[status], "metadata": {}, "error": {"message": message}}
            yield {"type": "workflow-finish", "runId": handle.id, "from": "WORKFLOW", "payload": payload}
            return
        for i, event in enumerate(events):
            offset += 1
            yield event
            if event.get("type") == "workflow-finish" and not (through_suspensions and i < len(events) - 1):
                return
        if not events:
            idle += 1
            if idle % ENDED_CHECK_POLLS == 0 and (last := await _ended_behind(handle, offset)) is not None:
                for event in last:
                    yield event
                return
        await asyncio.sleep(WORKFLOW_POLL_SECONDS)


ENDED_CHECK_POLLS = 20
"""A stream with nothing new asks every this many polls (about a second) whether its run ended behind it."""


async def _ended_behind(handle: WorkflowHandle[Any, Any], offset: int) -> list[dict[str, Any]] | None:
    """What a reader at `offset` of a run that ended gets last: nothing when it has every event (its finish
    included: a reader that reconnects gets each once); the run's finish when `offset` is past the end (a
    reader shown events of a workflow task lost with its worker, by a live query, can hold more than the run's
    history made). None while the run goes on or has events from `offset`."""
    status = (await handle.describe()).status
    if status == WorkflowExecutionStatus.RUNNING:
        return None
    every: list[dict[str, Any]] = await handle.query(names.EVENTS_QUERY, 0, result_type=list)
    if offset < len(every):
        return None
    if every and every[-1].get("type") == "workflow-finish":
        return [] if offset == len(every) else [every[-1]]
    if status in UNREADABLE_ENDS:  # ended without a finish of its own: canceled before runs said so
        payload = {"workflowStatus": UNREADABLE_ENDS[status], "metadata": {}}
        return [{"type": "workflow-finish", "runId": handle.id, "from": "WORKFLOW", "payload": payload}]
    return None


def record_stream(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def records() -> AsyncIterator[bytes]:
        async for event in events:
            yield (json.dumps(event, separators=(",", ":")) + "\x1e").encode()

    return StreamingResponse(records(), media_type="text/plain")
