"""One model step: load the thread, call the model (streaming its text to the event log, in a `chat` span),
resolve each requested tool call's tool and policy, and save the assistant message."""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from keel.activities.events import StepWriter, mirror_of
from keel.activities.failures import MissingMessages, RunIdReused
from keel.activities.run_lists import run_lists
from keel.activities.thread_cache import ThreadCache
from keel.activities.turn_tools import TurnTools
from keel.app import App, Tool
from keel.app.agent_tools import agent_instructions, agent_tools
from keel.app.controller_tools import SUBAGENT
from keel.model_providers import ModelError, ModelRequest
from keel.protocol import (
    APPROVAL_RESUME_SCHEMA,
    FinishChunk,
    FinishPayload,
    FinishReason,
    MessageRecord,
    StartChunk,
    StartPayload,
    StepFinishChunk,
    StepFinishPayload,
    StepOutput,
    StepResult,
    StepStartChunk,
    StepStartPayload,
    TextDeltaChunk,
    TextDeltaPayload,
    TextEndChunk,
    TextEndPayload,
    TextPart,
    TextStartChunk,
    TextStartPayload,
    ToolCallApprovalChunk,
    ToolCallApprovalPayload,
    ToolCallChunk,
    ToolCallPart,
    ToolCallPayload,
    ToolResultPart,
    Usage,
    describe_validation_error,
    log_context,
    metrics,
    names,
    tracing,
)
from keel.protocol.messages import with_answered_calls
from keel.storage import StepAnswer, StepRecord, Storage
from keel.workflows.contracts import ModelStepInput, ModelStepResult, PlannedToolCall, thread_file_reads

log = logging.getLogger("keel.activities.model_step")


HEARD = "_heardMessageIds"
"""The stored answer's record of the messages its step was given to write (and so answered from): an execution
of the step that finds the answer and is given more (a message delivered since) did not hear those. It is never
told whether storage holds them, which an execution whose workflow task was lost may have written."""


class ModelSteps:
    """Runs model steps for one app against one storage."""

    def __init__(self, app: App, storage: Storage) -> None:
        self._app = app
        self._storage = storage
        self._threads = ThreadCache(storage)

    async def run(self, input: ModelStepInput, *, record: StepRecord | None = None) -> ModelStepResult:
        """Run the step, or return the answer an earlier execution of it stored (`record`: what the caller's
        `begin_step` found for `input.message_id`; looked up here when not given)."""
        events = StepWriter(self._storage, input, f"model:{input.step}", mirror=mirror_of(input, input.turn))
        context = log_context.bound(
            run_id=input.run_id, agent_id=input.agent_id, step=input.step, thread_id=input.thread_id
        )
        try:
            with context:
                return await self._run(input, events, record)
        finally:
            events.stop()

    async def _run(self, input: ModelStepInput, events: StepWriter, record: StepRecord | None) -> ModelStepResult:
        started_at = time.monotonic()
        agent = self._app.agent(input.agent_id)
        run_id = input.run_id
        execution = input.execution_id
        if input.step == 1 and execution is None:  # a run started before run ids were claimed
            await self._storage.create_thread(input.thread_id, input.resource_id)
        elif input.step == 1 and execution is not None:
            owner = await self._storage.begin_run(
                run_id,
                execution,
                input.thread_id,
                input.resource_id,
                announce=names.thread_run_log(input.agent_id, input.thread_id),
            )
            if owner != execution:
                raise RunIdReused(
                    f"Run id {run_id!r} is already used by another run (execution {owner}): run ids are never "
                    "reused; start with a new id (pass threadId to continue that run's conversation)"
                )
        # Executed again (a lost workflow task re-runs a local activity at attempt 1, a retry, a lost worker):
        # the answer it stored is the step's answer. A model asked again would answer differently, and the
        # tools of the first answer may have run.
        if record is None:
            record = await self._storage.begin_step(run_id, answer_id=input.message_id)
            if record.answer is not None and activity.in_activity():  # it ran before (see `mark_attempt`)
                tracing.mark_attempt(max(activity.info().attempt, 2))
        if record.answer is not None:
            stored = dict(record.answer)
            heard = stored.pop(HEARD, None)
            unheard = False
            if input.writes.messages:  # what came with it this time (a delivered message) is kept, not heard
                ids = [m.id for m in input.writes.messages]
                if heard is not None:
                    unheard = not set(ids) <= set(heard)
                else:  # stored before answers named what they heard: what storage lacks was not
                    unheard = len(await self._storage.get_messages(ids)) < len(set(ids))
                await events.flush(input.writes.messages)
            heard_all = None if unheard or heard is None else await self._heard_all(input, heard)
            return await self._stored(input, stored, unheard=unheard, heard_all=heard_all)
        if input.step == 1 and execution is not None:
            events.add(
                StartChunk(run_id=run_id, payload=StartPayload(id=agent.id, run_id=run_id, message_id=input.message_id))
            )
        events.add_records(input.writes.events)
        events.add(
            StepStartChunk(run_id=run_id, payload=StepStartPayload(message_id=input.message_id, step=input.step))
        )
        if input.writes.messages:  # the caller's messages, or declined calls' results: context for this step
            await events.flush(input.writes.messages)
        context = await self._threads.messages(input.thread_id, before=input.message_id)
        _check_context(input, context)
        rc = input.request_context or {}
        turn = TurnTools(self._app, input.turn, rc) if input.turn is not None else None
        if turn is not None:
            await turn.load()
            tools, instructions, model = turn.offered, turn.instructions, turn.model
        else:
            tools = await agent_tools(self._app, agent, rc)
            instructions = await agent_instructions(self._app, agent, rc)
            model = agent.model
        shown = with_answered_calls(context)
        request = ModelRequest(instructions=instructions, messages=shown, tools=[t.spec for t in tools])
        text_id = f"{input.message_id}-text"
        started = False

        async def on_delta(text: str) -> None:
            nonlocal started
            if not started:
                started = True
                events.add(TextStartChunk(run_id=run_id, payload=TextStartPayload(id=text_id)))
            await events.delta(TextDeltaChunk(run_id=run_id, payload=TextDeltaPayload(id=text_id, text=text)))

        try:
            with tracing.model_call(
                model.model_id,
                run_id=run_id,
                step=input.step,
                agent_id=agent.id,
                thread_id=input.thread_id,
                server_url=getattr(model, "base_url", None),
            ) as traced:
                traced.request(instructions, shown)
                response = await model.generate(request, on_delta)
                traced.response(response.text, response.tool_calls, response.finish_reason, response.usage)
        except ModelError as err:
            log.warning("Step %d: model %s failed: %s", input.step, model.model_id, err)
            await events.flush()  # what streamed before the failure stays visible, marked with this attempt
            raise
        if started:
            events.add(TextEndChunk(run_id=run_id, payload=TextEndPayload(id=text_id)))

        planned = [await _plan(tools, c.id, c.name, c.args, turn) for c in response.tool_calls]
        _make_ids_unique(planned, taken=_tool_call_ids(context))
        parts: list[TextPart | ToolCallPart | ToolResultPart] = []
        if response.text:
            parts.append(TextPart(text=response.text))
        parts.extend(ToolCallPart(tool_call_id=p.tool_call_id, tool_name=p.tool_name, args=p.args) for p in planned)
        assistant = MessageRecord(id=input.message_id, role="assistant", content=parts)
        for p in planned:
            call = ToolCallPayload(tool_call_id=p.tool_call_id, tool_name=p.tool_name, args=p.args)
            events.add(ToolCallChunk(run_id=run_id, payload=call))
            if p.requires_approval and p.error is None:
                approval = ToolCallApprovalPayload(
                    tool_call_id=p.tool_call_id,
                    tool_name=p.tool_name,
                    args=p.args,
                    resume_schema=APPROVAL_RESUME_SCHEMA,
                )
                events.add(ToolCallApprovalChunk(run_id=run_id, payload=approval))
        finish_reason: FinishReason = "tool-calls" if planned else response.finish_reason
        # At the last step the run stops after the tools: there is no next step to continue to.
        last_step = input.step >= (input.max_steps or agent.max_steps)
        step_result = StepResult(reason=finish_reason, is_continued=bool(planned) and not last_step)
        output = StepOutput(text=response.text, usage=response.usage)
        events.add(
            StepFinishChunk(
                run_id=run_id,
                payload=StepFinishPayload(message_id=input.message_id, step_result=step_result, output=output),
            )
        )
        if not planned:
            total = (input.usage_before or Usage()).plus(response.usage)
            finish = FinishPayload(message_id=input.message_id, step_result=step_result, output=output, usage=total)
            events.add(FinishChunk(run_id=run_id, payload=finish))
        result = ModelStepResult(
            message_id=input.message_id,
            text=response.text,
            tool_calls=planned,
            finish_reason=finish_reason,
            usage=response.usage,
            max_steps=agent.max_steps,
        )
        if input.step == 1:  # the thread's earlier runs may have read files this run will write
            result.file_reads = thread_file_reads(context) or None
        # The message, its chunks and the answer in one transaction: a step executed again finds all or none.
        # Replacing the message: a re-execution that found no answer stored asks again, and its answer wins.
        # What it answered from, so a later execution can tell what came after: what came with it, and every user
        # message since the last answer (one an earlier execution of this step stored is in the context too).
        heard = list(dict.fromkeys([*(m.id for m in input.writes.messages), *_unanswered(context)]))
        answer = StepAnswer(input.message_id, result.model_dump(mode="json", exclude_none=True) | {HEARD: heard})
        await events.flush([assistant], replace=True, answer=answer)
        _answered(input, model.model_id, result, (time.monotonic() - started_at) * 1000)
        return await self._with_run_lists(input, result)

    async def _stored(
        self, input: ModelStepInput, answer: dict[str, Any], *, unheard: bool, heard_all: bool | None
    ) -> ModelStepResult:
        """The answer an earlier execution stored (with its message and chunks: nothing to write again)."""
        stored = ModelStepResult.model_validate(answer)
        stored.reused, stored.unheard, stored.heard_all = True, unheard, heard_all
        return await self._with_run_lists(input, stored)

    async def _heard_all(self, input: ModelStepInput, heard: list[str]) -> bool:
        """Whether the stored answer heard every user message the thread holds before it, and none came after
        it (one stored after it by a lost execution of a later step, or delivered since)."""
        thread = await self._threads.messages(input.thread_id)
        at = next((i for i, m in enumerate(thread) if m.id == input.message_id), None)
        if at is None:
            return False
        return set(_unanswered(thread[:at])) <= set(heard) and not any(m.role == "user" for m in thread[at + 1 :])

    async def _with_run_lists(self, input: ModelStepInput, result: ModelStepResult) -> ModelStepResult:
        if not result.tool_calls:  # the run ends here: its result lists, from storage
            result.run_tool_calls, result.run_tool_results = await run_lists(
                self._storage, input.thread_id, input.run_id
            )
        return result


def _answered(input: ModelStepInput, model_id: str, result: ModelStepResult, milliseconds: float) -> None:
    """The step's log record and metrics (once per answer: an answer found stored is neither logged nor counted)."""
    usage = result.usage
    tokens_in, tokens_out = (usage.input_tokens, usage.output_tokens) if usage is not None else (0, 0)
    metrics.model_step(input.agent_id, model_id, milliseconds, tokens_in, tokens_out)
    if not log.isEnabledFor(logging.INFO):
        return
    calls = ", ".join(c.tool_name for c in result.tool_calls) or "none"
    log.info(
        "Step %d: %s answered in %.0f ms (finish %s, tokens %d in / %d out, tool calls: %s)",
        input.step, model_id, milliseconds, result.finish_reason, tokens_in, tokens_out, calls,
        extra={"model": model_id, "finish_reason": result.finish_reason, "input_tokens": tokens_in,
               "output_tokens": tokens_out, "duration_ms": round(milliseconds, 1)},
    )  # fmt: skip


async def _plan(
    tools: list[Tool], call_id: str, name: str, args: dict[str, Any], turn: TurnTools | None = None
) -> PlannedToolCall:
    """Resolve a requested call's tool and policy; problems become an `error` the model will see. In a session's
    turn the session's permissions decide whether the call waits for approval."""
    planned = PlannedToolCall(tool_call_id=call_id, tool_name=name, args=args)
    tool = next((t for t in tools if t.id == name), None)
    if tool is None:
        if turn is not None and turn.denied(name):
            planned.error = f"Tool {name!r} is denied by this session's permissions"
        else:
            planned.error = f"Tool {name!r} not found. Available tools: {', '.join(t.id for t in tools)}"
        return planned
    try:
        parsed = tool.parse_args(args)
    except ValidationError as err:
        planned.error = f"Invalid arguments for tool {name!r}: {describe_validation_error(err)}"
        return planned
    planned.idempotent = tool.idempotent
    if turn is not None:
        planned.category = turn.category(tool)
        planned.requires_approval = turn.policy(tool) == "ask"
        if name == SUBAGENT:
            plan, problem = await turn.subagent_plan(parsed)
            if problem is not None:
                planned.error = problem
                return planned
            planned.subagent = plan
    else:
        planned.requires_approval = await tool.needs_approval(args)
    if tool.workspace_tool is not None:
        planned.file_path = tool.workspace_tool.file_path(args)
        if tool.workspace_tool.pinned_to_host and isinstance(args.get("pid"), str | int):
            planned.process_id = str(args["pid"])
    return planned


def _tool_call_ids(context: list[MessageRecord]) -> set[str]:
    """The tool call ids the conversation already holds."""
    return {
        part.tool_call_id
        for message in context
        if message.role == "assistant" and isinstance(message.content, list)
        for part in message.content
        if isinstance(part, ToolCallPart)
    }


def _make_ids_unique(calls: list[PlannedToolCall], *, taken: set[str]) -> None:
    """Approvals and results are keyed by tool call id: a model that repeats an id (within one answer, or one an
    earlier step of the conversation used, as some servers do) gets the repeat renamed `id-2`, `id-3`, ...,
    in the message it is shown later too."""
    seen = set(taken)
    for call in calls:
        base, n = call.tool_call_id, 1
        while call.tool_call_id in seen:
            n += 1
            call.tool_call_id = f"{base}-{n}"
        seen.add(call.tool_call_id)


def _unanswered(context: list[MessageRecord]) -> list[str]:
    """The ids of the user messages after the context's last assistant message, oldest first."""
    ids: list[str] = []
    for message in reversed(context):
        if message.role == "assistant":
            break
        if message.role == "user":
            ids.insert(0, message.id)
    return ids


def _check_context(input: ModelStepInput, context: list[MessageRecord]) -> None:
    """Refuse to answer from a thread that lacks what earlier steps of the run wrote (storage that lost
    committed writes): a shorter conversation would look plausible and be wrong."""
    present = {m.id for m in context}
    missing = [m for m in input.requires if m not in present]
    if missing:
        raise MissingMessages(
            f"Thread {input.thread_id!r} lacks message {', '.join(missing)}, which an earlier step of run "
            f"{input.run_id!r} wrote: storage lost committed writes, so step {input.step} will not answer from a "
            "shorter conversation"
        )
