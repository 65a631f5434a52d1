"""The activities of AgentController sessions (`AgentSession`): the controller's configuration as the session
checks against it, events for the session's log, thread operations with the thread's settings, display-state
snapshots, the goal's judge, and copies of a thread for forked subagents.

Each write of events is tagged with a source the session numbers (`session:<n>`) and made once: an activity
retried after its write committed adds nothing, so a subscriber never sees an event twice.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.activities.failures import translated
from keel.activities.heartbeat import heartbeating
from keel.app import App
from keel.app.controller import ControllerDefinition
from keel.model_providers import ModelRequest
from keel.protocol import EventRecord, MessageRecord, names, tracing
from keel.protocol.controller_events import SNAPSHOT, DisplayState
from keel.protocol.messages import with_answered_calls
from keel.storage import Storage, StoredMessage, Thread
from keel.storage.threads import FORKED_SUBAGENT
from keel.workflows.contracts import ForkThreadInput
from keel.workflows.session_contracts import (
    JudgeInput,
    JudgeResult,
    ModeInfo,
    SessionConfig,
    SessionConfigInput,
    SessionEventsInput,
    SessionSnapshotInput,
    SessionThreadInput,
    SessionThreadResult,
    UnheardInput,
    UnheardResult,
)


def refused(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


class SessionActivities:
    def __init__(self, app: App, storage: Storage) -> None:
        self._app = app
        self._storage = storage

    @activity.defn(name=names.SESSION_CONFIG)
    async def session_config(self, input: SessionConfigInput) -> SessionConfig:
        """The controller's modes, models, state schema and defaults, as its session checks updates against."""
        with translated():
            controller = self._controller(input.controller_id)
            return SessionConfig(
                controller_id=controller.id,
                agent_id=controller.agent.id,
                modes=[
                    ModeInfo(id=m.id, name=m.name, default_model_id=m.default_model_id, transitions_to=m.transitions_to)
                    for m in controller.modes
                ],
                default_mode_id=controller.default_mode.id,
                models=sorted(controller.models),
                state_schema=controller.state_json_schema(),
                initial_state=controller.initial_state_values(),
                subagents=[s.id for s in controller.subagents],
            )

    @activity.defn(name=names.SESSION_EVENTS)
    async def session_events(self, input: SessionEventsInput) -> None:
        """Append the events to the session's log, once."""
        with translated():
            await self._append(input.session_id, input.events, input.source)

    @activity.defn(name=names.SESSION_THREAD)
    async def session_thread(self, input: SessionThreadInput) -> SessionThreadResult:
        """A thread operation of a session: create, switch (made when missing), rename, clone, delete, or write the
        current thread's settings; its events go to the session's log with it."""
        with translated():
            return await self._thread(input)

    async def _thread(self, input: SessionThreadInput) -> SessionThreadResult:
        change, storage = input.change, self._storage
        if input.current_thread_id is not None and input.settings:
            await self._merge(input.current_thread_id, input.settings)
        events: list[dict[str, Any]] = []
        result = SessionThreadResult(thread_id=input.current_thread_id)
        if change.op == "settings":
            pass
        elif change.op in ("create", "clone"):
            new_id = change.thread_id
            assert new_id is not None
            metadata = {**input.tags, **input.new_thread_settings}
            if change.op == "clone":
                source_id = change.source_thread_id or input.current_thread_id
                if source_id is None:
                    raise refused("ThreadNotFound", "No thread to clone: the session has none")
                source = await self._owned(source_id, input.resource_id)
                metadata = {**(source.metadata or {}), "clone": {"sourceThreadId": source_id}}
                title = change.title if change.title is not None else source.title or ""
                thread = await storage.create_thread(new_id, input.resource_id, title, metadata)
                await _copy_messages(storage, source_id, thread)
            else:
                thread = await storage.create_thread(new_id, input.resource_id, change.title or "", metadata)
            events.append({"type": "thread_created", "thread": thread.controller_json()})
            result = _on(thread)
        elif change.op == "switch":
            assert change.thread_id is not None
            found = await storage.get_thread(change.thread_id)
            if found is None:
                if not change.create_missing:
                    raise refused("ThreadNotFound", f"Thread not found: {change.thread_id}")
                metadata = {**input.tags, **input.new_thread_settings}
                thread = await storage.create_thread(change.thread_id, input.resource_id, change.title or "", metadata)
                events.append({"type": "thread_created", "thread": thread.controller_json()})
            elif (thread := found).resource_id != input.resource_id:
                raise refused("ThreadNotFound", f"Thread not found: {change.thread_id}")
            elif change.thread_id != input.current_thread_id:
                events.append(
                    {"type": "thread_changed", "threadId": thread.id, "previousThreadId": input.current_thread_id}
                )
            result = _on(thread)
        elif change.op == "latest":
            threads, _ = await storage.list_threads(input.resource_id)
            match = [t for t in threads if _matches(t, input.tags)]
            if match:
                thread = max(match, key=lambda t: t.updated_at)
            else:
                assert change.thread_id is not None
                metadata = {**input.tags, **input.new_thread_settings}
                thread = await storage.create_thread(change.thread_id, input.resource_id, "", metadata)
                events.append({"type": "thread_created", "thread": thread.controller_json()})
            result = _on(thread)
        elif change.op == "rename":
            target = change.thread_id or input.current_thread_id
            if target is None:
                raise refused("ThreadNotFound", "No thread to rename: the session has none")
            await self._owned(target, input.resource_id)
            thread = await storage.update_thread(target, title=change.title or "")
            await self._merge(target, {"titlePinned": True})
            events.append({"type": "thread_title_updated", "threadId": target, "title": thread.title or ""})
        elif change.op == "delete":
            assert change.thread_id is not None
            await self._owned(change.thread_id, input.resource_id)
            await storage.delete_thread(change.thread_id)
            unbound = change.thread_id == input.current_thread_id
            events.append({"type": "thread_deleted", "threadId": change.thread_id, "unbound": unbound})
            result = SessionThreadResult(thread_id=None if unbound else input.current_thread_id)
        await self._append(input.session_id, events, input.source)
        result.events = events
        return result

    @activity.defn(name=names.SESSION_SNAPSHOT)
    async def session_snapshot(self, input: SessionSnapshotInput) -> int:
        """Fold the session's log from the last snapshot and store the display state as a new one; its offset."""
        with translated():
            state = DisplayState()
            for event in await self._storage.read_events(input.session_id, offset=input.from_offset or 0):
                state.apply({"type": event.type, **event.payload})
            record = EventRecord(type=SNAPSHOT, payload={"type": SNAPSHOT, "displayState": state.snapshot()})
            await self._storage.write(input.session_id, events=[record], source=input.source, once=True)
            events = await self._storage.read_events(input.session_id, offset=input.from_offset or 0)
            return max(e.offset for e in events if e.type == SNAPSHOT and e.source == input.source)

    @activity.defn(name=names.SESSION_JUDGE)
    async def session_judge(self, input: JudgeInput) -> JudgeResult:
        """Ask the judge model whether the session's goal is met, given its thread; `goal_evaluation` events."""
        with translated():
            async with heartbeating():  # a lost worker is noticed in seconds, not at the 5-minute timeout
                return await self._judge(input)

    async def _judge(self, input: JudgeInput) -> JudgeResult:
        controller = self._controller(input.controller_id)
        model = controller.models.get(input.judge_model_id or "") or controller.judge_model or controller.agent.model
        messages, _ = await self._storage.list_messages(input.thread_id) if input.thread_id else ([], 0)
        transcript = with_answered_calls(
            [MessageRecord(id=m.id, role=m.role, content=m.content) for m in messages[-40:]]
        )
        question = MessageRecord(
            id=f"{input.session_id}-judge-{input.run}",
            role="user",
            content=(
                f"Goal: {input.objective}\n\nHas the conversation above met the goal? Answer with JSON only: "
                '{"done": true|false, "reason": "..."}'
            ),
        )
        request = ModelRequest(
            instructions="You judge whether an assistant met a goal. Answer only with the JSON asked for.",
            messages=[*transcript, question],
            tools=[],
        )

        async def ignore(_: str) -> None:
            return None

        with tracing.model_call(
            model.model_id, thread_id=input.thread_id or None, server_url=getattr(model, "base_url", None)
        ) as call:
            call.request(request.instructions, request.messages)
            answer = await model.generate(request, ignore)
            call.response(answer.text, answer.tool_calls, answer.finish_reason, answer.usage)
        done, reason = _verdict(answer.text)
        return JudgeResult(done=done, reason=reason)

    @activity.defn(name=names.SESSION_UNHEARD)
    async def session_unheard(self, input: UnheardInput) -> UnheardResult:
        """Which messages delivered into an ended turn its thread does not hold: the turn ended before a model
        step read them (delivered as it completed, or refused by a full inbox)."""
        with translated():
            ids = {names.delivered_message_id(input.run_id, m): m for m in input.message_ids}
            held = {message.id for message in await self._storage.get_messages(list(ids))}
            return UnheardResult(message_ids=[m for stored, m in ids.items() if stored not in held])

    @activity.defn(name=names.FORK_THREAD)
    async def fork_thread(self, input: ForkThreadInput) -> None:
        """A copy of the parent's thread for a forked subagent (made once; ids derive from the copy's)."""
        with translated():
            source = await self._storage.get_thread(input.source_thread_id)
            metadata = {**((source.metadata if source else None) or {}), FORKED_SUBAGENT: True}
            thread = await self._storage.create_thread(input.thread_id, input.resource_id, None, metadata)
            await _copy_messages(self._storage, input.source_thread_id, thread)

    def all(self) -> list[Any]:
        return [
            self.session_config,
            self.session_events,
            self.session_thread,
            self.session_snapshot,
            self.session_judge,
            self.session_unheard,
            self.fork_thread,
        ]

    # --- helpers -----------------------------------------------------------------------------------------------

    def _controller(self, controller_id: str) -> ControllerDefinition:
        return self._app.controller(controller_id)

    async def _append(self, log: str, events: list[dict[str, Any]], source: str) -> None:
        if events:
            records = [EventRecord(type=str(e["type"]), payload=e) for e in events]
            await self._storage.write(log, events=records, source=source, once=True)

    async def _owned(self, thread_id: str, resource_id: str) -> Thread:
        thread = await self._storage.get_thread(thread_id)
        if thread is None or thread.resource_id != resource_id:
            raise refused("ThreadNotFound", f"Thread not found: {thread_id}")
        return thread

    async def _merge(self, thread_id: str, settings: dict[str, Any]) -> None:
        if await self._storage.get_thread(thread_id) is not None:
            await self._storage.merge_thread_metadata(thread_id, settings)


def _on(thread: Thread) -> SessionThreadResult:
    return SessionThreadResult(thread_id=thread.id, thread=thread.controller_json(), settings=thread.metadata or {})


def _matches(thread: Thread, tags: dict[str, Any]) -> bool:
    """A thread a new session may take as its own: not a forked subagent's, marked with the session's tags,
    and of the session's scope (none: a thread no scoped session made)."""
    metadata = thread.metadata or {}
    if metadata.get(FORKED_SUBAGENT) or metadata.get("sessionScope") != tags.get("sessionScope"):
        return False
    return all(metadata.get(k) == v for k, v in tags.items())


async def _copy_messages(storage: Storage, source_thread_id: str, thread: Thread) -> None:
    messages, _ = await storage.list_messages(source_thread_id)
    now = datetime.now(UTC)
    copies = [
        StoredMessage(
            id=f"{thread.id}-copy-{i}",
            thread_id=thread.id,
            resource_id=thread.resource_id,
            role=m.role,
            content=m.content,
            created_at=now,
        )
        for i, m in enumerate(messages)
    ]
    await storage.save_messages(copies)


def _verdict(text: str) -> tuple[bool, str]:
    match = re.search(r"\{.*\}", text, re.S)
    if match:
        try:
            found = json.loads(match.group(0))
            return bool(found.get("done")), str(found.get("reason", ""))
        except (ValueError, AttributeError):
            pass
    return "true" in text.lower() and "false" not in text.lower(), text.strip()[:500]
