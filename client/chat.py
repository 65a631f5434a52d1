"""`keel chat`: a terminal client for one AgentController session, and `keel sessions`, the open sessions.

The chat keeps nothing the session does not: it re-attaches with `create_session` (get-or-create), prints what
it missed since this terminal client last saw the session (the offset of the last event it printed is kept per
(controller, resource, scope) under `$KEEL_DATA_DIR/chat/`), asks about whatever the session waits on (approvals,
`ask_user` questions, submitted plans: from its snapshot), then reads lines and streams the session's events
(`Session.events(offset)`) as they are written. A restart of the chat or of the worker neither loses nor repeats
an event on screen: the events are read from the last offset printed.

One loop handles everything, in order: the session's events (read by a task into the same inbox), the lines the
user types (read by a thread), Ctrl-C. The prompt is shown when that inbox is empty: `> ` when no turn runs, the
question of the first call the session waits on otherwise. Piped input is read a line per prompt, so a script
answers the approvals and questions it expects (in `printf 'hello\\ny\\n' | keel chat ...`, `y` approves what
`hello` led to) and sees each turn through; it leaves at the end of its input.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from keel.client.errors import KeelClientError

if TYPE_CHECKING:
    from keel.app.controller import ControllerDefinition
    from keel.client.controller import Session
    from keel.client.keel_client import KeelClient
    from keel.storage import Storage
    from keel.workflows.session_contracts import Decision, PendingItem, SessionSnapshot

FIRST_TIME_MESSAGES = 6
"""How many of the current thread's messages a terminal that never saw the session prints."""
RESULT_WIDTH = 160
"""Tool arguments and results are cut to this many characters."""
CATCH_UP_QUIET = 0.3
"""Seconds without a missed event after which the catch-up is over (a superseded attempt's events are skipped, so
the last offset before the start may never be printed)."""
SLOW_ANSWER_SECONDS = 2.0
"""A session that has not answered the chat's first question by then: the chat says it waits (for a worker)."""
RETRY_SECONDS = 1.0

HELP = """\
  a line is sent as a message; while the session waits on you (an approval, a question), it is your answer
  /mode [ID]        show the mode, or switch to ID
  /model [ID]       show the model, or switch to ID (for this thread)
  /thread [new|ID]  show the thread, start a new one, or switch to ID
  /threads          the resource's threads
  /abort            stop the running turn (Ctrl-C too, while it runs)
  /help             this
  /quit             leave (Ctrl-D too); the session stays, `keel chat` comes back to it"""


# --- what this terminal has seen --------------------------------------------------------------------------------


class SeenOffset:
    """The offset of the last event of the session this terminal client printed, in a small JSON file."""

    def __init__(self, data_dir: Path, controller_id: str, resource_id: str, scope: str | None) -> None:
        key = json.dumps([controller_id, resource_id, scope]).encode()
        self.path = data_dir / "chat" / f"{hashlib.sha256(key).hexdigest()[:24]}.json"
        self._saved: int | None = None

    def load(self, session_id: str) -> int | None:
        try:
            found = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        offset = found.get("offset") if isinstance(found, dict) and found.get("sessionId") == session_id else None
        return offset if isinstance(offset, int) else None

    def save(self, session_id: str, offset: int) -> None:
        if offset == self._saved:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"sessionId": session_id, "offset": offset}))
        os.replace(partial, self.path)
        self._saved = offset


# --- the terminal ------------------------------------------------------------------------------------------------


class Screen:
    """Lines and streamed text on the terminal, knowing whether the cursor is mid-line (streamed text, a
    prompt) and which prompt, if any, is showing. Off a terminal (`echoes` False: input piped in), the lines read
    are written out after their prompt, so the output reads as a transcript."""

    def __init__(self, out: TextIO, *, echoes: bool = True) -> None:
        self.out = out
        self.echoes = echoes
        color = out.isatty() and "NO_COLOR" not in os.environ
        self.dim, self.bold, self.red, self.reset = (
            ("\033[2m", "\033[1m", "\033[31m", "\033[0m") if color else ("", "", "", "")
        )
        self.mid_line = False
        self.prompted: object = None

    def write(self, text: str) -> None:
        if self.prompted is not None:
            self._end_line()
        self.out.write(text)
        self.out.flush()
        self.mid_line = not text.endswith("\n") if text else self.mid_line

    def line(self, text: str = "", style: str = "") -> None:
        self._end_line()
        self.out.write(f"{style}{text}{self.reset if style else ''}\n")
        self.out.flush()

    def note(self, text: str) -> None:
        self.line(text, self.dim)

    def error(self, text: str) -> None:
        self.line(f"error: {' '.join(text.split())}", self.red)

    def prompt(self, key: object, lines: list[str], ask: str) -> None:
        self._end_line()
        for text in lines:
            self.out.write(f"{self.bold}{text}{self.reset}\n")
        self.out.write(f"{self.bold}{ask}{self.reset}")
        self.out.flush()
        self.mid_line, self.prompted = bool(ask), key

    def typed(self, line: str | None) -> None:
        """The user ended a line: the terminal's echo moved the cursor to the next one."""
        if line is None:  # Ctrl-D: the cursor stays after the prompt
            self._end_line()
            return
        if not self.echoes:
            self.out.write(f"{'' if self.mid_line else '> '}{line.rstrip(chr(10))}\n")
            self.out.flush()
        self.mid_line, self.prompted = False, None

    def _end_line(self) -> None:
        if self.mid_line:
            self.out.write("\n")
        self.mid_line, self.prompted = False, None


def short(value: Any, width: int = RESULT_WIDTH) -> str:
    """`value` on one line (a string as it is, anything else as JSON), cut to `width` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _result(value: Any) -> Any:
    """A controller tool's `{"content": ..., "isError": ...}` shows as its content."""
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return value


def _user_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if texts:
            return " ".join(texts)
    return short(content)


# --- questions: what the session waits on ------------------------------------------------------------------------


@dataclass
class Question:
    """A call the session waits on: a decision (`approval`) or resume data (`suspension`)."""

    kind: str
    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = field(default_factory=dict)
    payload: Any = None
    category: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.tool_call_id)

    @classmethod
    def of(cls, item: PendingItem) -> Question:
        return cls(item.kind, item.tool_call_id, item.tool_name, dict(item.args), item.suspend_payload, item.category)

    def prompt(self) -> tuple[list[str], str]:
        """The lines that ask, and the prompt the answer is typed after."""
        call = f"{self.tool_name}({short(self.args, 100)})"
        if self.kind == "approval":
            category = f" ({self.category})" if self.category else ""
            return [], f"? approve {call}? [y]es/[n]o/[a]lways for this category{category} "
        p = self.payload if isinstance(self.payload, dict) else {}
        if self.tool_name == "ask_user" and "question" in p:
            options = [o for o in p.get("options") or [] if isinstance(o, dict)]
            lines = [f"? {p['question']}"]
            for i, o in enumerate(options, 1):
                lines.append(f"  {i}. {o.get('label')}" + (f" - {o['description']}" if o.get("description") else ""))
            if not options:
                return lines, "answer: "
            several = " (several: 1,3)" if p.get("selectionMode") == "multi_select" else ""
            return lines, f"answer with a number{several} or your own words: "
        if self.tool_name == "submit_plan":
            return [f"? plan submitted: {p.get('path', '')}"], "approve, or reject [feedback]: "
        if self.tool_name == "request_access":
            target = p.get("category") or p.get("toolName") or "access"
            return [f"? allow {target} for the rest of the session? ({p.get('reason', '')})"], "[y]es/[n]o [reason]: "
        return [f"? {self.tool_name} waits for an answer: {short(self.payload)}"], "answer (JSON or text): "

    def answer(self, line: str) -> tuple[str, Any] | str:
        """What to send for `line`: (`approve`|`decline`|`always_allow_category`, reason) for an approval, ("resume",
        data) for a suspension; a string says what a valid answer looks like."""
        first, _, rest = line.partition(" ")
        word, reason = first.lower(), rest.strip() or None
        p = self.payload if isinstance(self.payload, dict) else {}
        if self.kind == "approval":
            decisions = {"y": "approve", "yes": "approve", "n": "decline", "no": "decline"}
            decisions |= {"a": "always_allow_category", "always": "always_allow_category"}
            if word in decisions:
                return decisions[word], reason
            return "answer y (approve), n [reason] (decline) or a (always allow this category)"
        if self.tool_name == "ask_user" and "question" in p:
            labels = [str(o.get("label")) for o in p.get("options") or [] if isinstance(o, dict)]
            picks = [x.strip() for x in line.split(",")]
            if labels and all(x.isdigit() and 1 <= int(x) <= len(labels) for x in picks):
                chosen = [labels[int(x) - 1] for x in picks]
                if p.get("selectionMode") == "multi_select":
                    return "resume", chosen
                if len(chosen) == 1:
                    return "resume", chosen[0]
                return "choose one option"
            return "resume", line
        if self.tool_name == "submit_plan":
            if word in ("approve", "approved", "a", "y", "yes"):
                return "resume", {"action": "approved"}
            if word in ("reject", "rejected", "r", "n", "no"):
                return "resume", {"action": "rejected"} | ({"feedback": reason} if reason else {})
            return "answer approve, or reject [feedback]"
        if self.tool_name == "request_access":
            if word in ("y", "yes", "n", "no"):
                return "resume", {"granted": word.startswith("y")} | ({"reason": reason} if reason else {})
            return "answer y or n [reason]"
        try:
            return "resume", json.loads(line)
        except ValueError:
            return "resume", line


# --- the chat ----------------------------------------------------------------------------------------------------


class Chat:
    def __init__(
        self,
        session: Session,
        definition: ControllerDefinition,
        seen: SeenOffset,
        screen: Screen,
        *,
        interactive: bool,
    ) -> None:
        self.session = session
        self.definition = definition
        self.seen = seen
        self.screen = screen
        self.interactive = interactive
        self.inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.questions: dict[tuple[str, str], Question] = {}
        self.asked: tuple[str, str] | None = None
        self.running = False
        self.aborting = False
        self.ours: set[str] = set()
        self.streaming: str | None = None
        self.catching_up = True
        self.catch_up_end = 0
        self.thread_id: str | None = None
        self.awaited: tuple[frozenset[str], float] | None = None
        """Event types a change just made will write, and until when the prompt waits for one of them."""
        self.line_wanted = threading.Semaphore(0)
        """Piped input is read a line per prompt (a scripted `y` answers the approval it follows, not sent on)."""
        self.line_asked = False
        self.reading = False
        """Whether what is typed is read yet (from when the chat has shown what the session waits on)."""
        self._tasks: set[asyncio.Future[Any]] = set()

    # --- the loop ---------------------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self.inbox.put_nowait, ("interrupt",))
        pump: asyncio.Future[None] | None = None
        try:
            start = await self._attach()
            pump = asyncio.ensure_future(self._pump(start))
            while True:
                if not self.inbox.empty():
                    item = self.inbox.get_nowait()
                elif self.catching_up:
                    try:
                        item = await asyncio.wait_for(self.inbox.get(), CATCH_UP_QUIET)
                    except TimeoutError:
                        await self._caught_up()
                        continue
                elif (left := self._awaiting(loop.time())) is not None:
                    try:
                        item = await asyncio.wait_for(self.inbox.get(), left)
                    except TimeoutError:
                        continue
                else:
                    asking = self._prompt()
                    if asking and not self.interactive and not self.line_asked:
                        self.line_asked = True
                        self.line_wanted.release()
                    item = await self.inbox.get()
                code = await self._handle(item)
                if code is not None:
                    return code
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            for task in [pump, *self._tasks]:
                if task is not None:
                    task.cancel()
            if self.screen.mid_line:
                self.screen.line()

    def _expect(self, *types: str) -> None:
        """The change just made writes one of these events: print it before the next prompt (for a second at
        most: a change to what is already there writes none)."""
        self.awaited = (frozenset(types), asyncio.get_running_loop().time() + 1.0)

    def _awaiting(self, now: float) -> float | None:
        if self.awaited is not None and self.awaited[1] > now:
            return self.awaited[1] - now
        self.awaited = None
        return None

    def _read_lines(self, loop: asyncio.AbstractEventLoop) -> None:
        """The input thread: each line into the inbox, then None at the end of the input (Ctrl-D). Piped input: a
        line when the chat asks for one."""
        while True:
            if not self.interactive:
                self.line_wanted.acquire()
            line = sys.stdin.readline()
            loop.call_soon_threadsafe(self.inbox.put_nowait, ("line", line or None))
            if not line:
                return

    async def _pump(self, offset: int) -> None:
        """The session's events from `offset`, each with the display state after it, into the inbox; reading again
        from the next unread offset if storage or Temporal fails."""
        failing = False
        while True:
            held: dict[str, Any] | None = None
            try:
                async for item in self.session.events(offset):
                    if item["type"] != "display_state_changed":
                        held = item
                    elif held is not None:
                        self.inbox.put_nowait(("event", held, item["displayState"]))
                        offset, held, failing = held["offset"] + 1, None, False
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a storage or Temporal outage: say so once, then keep trying
                if not failing:
                    self.inbox.put_nowait(("warn", f"cannot read the session's events ({err}); retrying"))
                failing = True
            await asyncio.sleep(RETRY_SECONDS)

    def _spawn(self, call: Any) -> None:
        """Run a session call in the background (one that waits, like `abort`); its error is reported in order."""
        task = asyncio.ensure_future(call)
        self._tasks.add(task)

        def done(t: asyncio.Future[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.inbox.put_nowait(("error", str(t.exception())))

        task.add_done_callback(done)

    # --- attaching ------------------------------------------------------------------------------------------------

    async def _attach(self) -> int:
        """The header, then what this terminal missed (or, the first time, the last messages); returns the offset
        the events are read from."""
        session = self.session
        asked = asyncio.ensure_future(session.snapshot())
        if not (await asyncio.wait({asked}, timeout=SLOW_ANSWER_SECONDS))[0]:
            self.screen.note("waiting for the session to answer (is a worker of its task queue running?)")
        snapshot = await asked
        self.thread_id = snapshot.thread_id
        scope = f" ({session.scope})" if session.scope else ""
        self.screen.note(f"keel chat: {self.definition.id} for {session.resource_id}{scope}, session {session.id}")
        self.screen.note(
            f"thread {snapshot.thread_id}, mode {snapshot.mode_id}, model {self._model(snapshot.model_id)}; "
            "/help for commands, Ctrl-D to leave"
        )
        end = await session.controller.storage.log_end(session.id)
        last = self.seen.load(session.id)
        if last is None or last >= end:
            await self._last_messages(snapshot.thread_id)
            self.seen.save(session.id, end - 1)
            await self._caught_up(snapshot)
            return end
        if last + 1 < end:
            self.screen.note("-- what happened since this terminal was last here --")
            self.catch_up_end = end
        else:
            await self._caught_up(snapshot)
        return last + 1

    async def _caught_up(self, snapshot: SessionSnapshot | None = None) -> None:
        """Missed events printed: ask about what the session waits on now (its snapshot says), and from then on
        read what is typed (a line typed while the chat attached waits in the terminal until then: it answers
        the question shown, rather than being sent as a message that declines it)."""
        self.catching_up = False
        snapshot = snapshot or await self.session.snapshot()
        self.running = snapshot.running
        self.questions = {q.key: q for q in map(Question.of, snapshot.pending)}
        if not self.reading:
            self.reading = True
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._read_lines, args=(loop,), daemon=True, name="keel-chat-input").start()

    async def _last_messages(self, thread_id: str | None) -> None:
        if thread_id is None:
            return
        messages = await self.session.thread.list_messages(thread_id, limit=FIRST_TIME_MESSAGES)
        if messages:
            self.screen.note(f"-- the last messages of thread {thread_id} --")
        for m in messages:
            if m.get("role") == "user":
                self.screen.line(f"> {_user_text(m.get('content'))}")
                continue
            content = m.get("content")
            parts = content if isinstance(content, list) else [content]
            for part in parts:
                if not isinstance(part, dict):
                    if part:
                        self.screen.line(str(part))
                elif part.get("type") == "text" and part.get("text"):
                    self.screen.line(part["text"])
                elif part.get("type") == "tool-call":
                    self.screen.note(f"  -> {part.get('toolName')}({short(part.get('args'))})")
                elif part.get("type") == "tool-result":
                    self.screen.note(f"  <- {part.get('toolName')}: {short(_result(part.get('result')))}")

    # --- prompts ----------------------------------------------------------------------------------------------

    def _question(self) -> Question | None:
        return None if self.catching_up else next(iter(self.questions.values()), None)

    def _prompt(self) -> bool:
        """With nothing left to print: ask the first question, or show `> ` when no turn runs. Whether it asks."""
        question = self._question()
        if question is not None:
            if self.screen.prompted != question.key:
                lines, ask = question.prompt()
                self.screen.prompt(question.key, lines, ask)
                self.asked = question.key
            return True
        if self.running:
            return False
        if self.screen.prompted != "input":
            self.screen.prompt("input", [], "> ")
            self.asked = None
        return True

    # --- what comes in ----------------------------------------------------------------------------------------

    async def _handle(self, item: tuple[Any, ...]) -> int | None:
        kind = item[0]
        if kind == "event":
            await self._event(item[1], item[2])
        elif kind == "line":
            self.line_asked = False
            self.screen.typed(item[1])
            return await self._line(item[1])
        elif kind == "interrupt":
            if not self.running or self.aborting:
                return 130
            self.aborting = True
            self.screen.note("^C: aborting the turn (Ctrl-C again leaves)")
            self._spawn(self.session.abort())
        elif kind == "warn":
            self.screen.note(item[1])
        elif kind == "error":
            self.screen.error(item[1])
        return None

    async def _line(self, raw: str | None) -> int | None:
        if raw is None:
            return 0
        line = raw.strip()
        if not line:
            return None
        try:
            if line.startswith("/"):
                return await self._command(line)
            if self.asked is None or self.catching_up:
                await self._send(line)
            elif (question := self.questions.get(self.asked)) is not None:
                await self._answer(question, line)
            else:  # not sent as a message: it was meant as an answer
                self.screen.note("  (no longer asked: answered elsewhere, or the turn ended)")
                self.asked = None
        except KeelClientError as err:
            self.screen.error(str(err))
        return None

    async def _send(self, text: str) -> None:
        message_id = f"msg-{uuid.uuid4()}"
        self.ours.add(message_id)
        was_running, self.running = self.running, True
        try:
            accepted = await self.session.send_message(text, wait=False, message_id=message_id)
        except BaseException:
            self.running = was_running
            raise
        if accepted.queued:
            self.screen.note("  (queued: it is read after the running turn)")

    async def _answer(self, question: Question, line: str) -> None:
        from keel.client.controller import SessionError

        answer = question.answer(line)
        if isinstance(answer, str):
            self.screen.note(f"  {answer}")
            return
        what, value = answer
        try:
            if what == "resume":
                await self.session.respond_to_tool_suspension(question.tool_call_id, value)
            else:
                decision = cast("Decision", what)
                await self.session.respond_to_tool_approval(question.tool_call_id, decision, reason=value)
        except SessionError as err:
            self.screen.error(str(err))
            if err.kind in ("AlreadyDecided", "UnknownToolCall"):  # decided elsewhere: nothing to ask any more
                self.questions.pop(question.key, None)
            return
        self.questions.pop(question.key, None)
        self.asked = None

    async def _command(self, line: str) -> int | None:
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        session = self.session
        if name in ("quit", "exit", "q"):
            return 0
        if name == "help":
            self.screen.note(HELP)
        elif name == "abort":
            self.aborting = True
            self._spawn(session.abort())
        elif name == "mode":
            if arg:
                await session.mode.switch(arg)
                self._expect("mode_changed")
            else:
                current = (await session.snapshot()).mode_id
                modes = ", ".join(m.id + (f" ({m.name})" if m.name and m.name != m.id else "") for m in self.modes)
                self.screen.note(f"  mode {current}; modes: {modes}")
        elif name == "model":
            if arg:
                await session.model.switch(arg)
                self._expect("model_changed")
            else:
                self.screen.note(f"  model {self._model((await session.snapshot()).model_id)}")
        elif name == "thread":
            if arg == "new":
                await session.thread.create()
                self._expect("thread_created")
            elif arg:
                await session.thread.switch(arg)
                self._expect("thread_changed", "thread_created")
            else:
                self.screen.note(f"  thread {(await session.snapshot()).thread_id}")
        elif name == "threads":
            on = (await session.snapshot()).thread_id
            for t in await session.thread.list():
                mark = "*" if t.get("id") == on else " "
                title = f"  {t['title']}" if t.get("title") else ""
                self.screen.note(f" {mark} {t.get('id')}  updated {t.get('updatedAt', '')[:19]}{title}")
        else:
            self.screen.error(f"unknown command /{name} (/help lists them)")
        return None

    async def _category(self, tool_call_id: str) -> str | None:
        """The category of a call waiting for approval (its event does not say; the session's snapshot does)."""
        try:
            pending = (await self.session.snapshot()).pending
        except KeelClientError:
            return None
        return next((p.category for p in pending if p.tool_call_id == tool_call_id and p.kind == "approval"), None)

    @property
    def modes(self) -> tuple[Any, ...]:
        return self.definition.modes

    def _model(self, model_id: str | None) -> str:
        return model_id or f"{self.definition.agent.model.model_id} (the agent's)"

    # --- events ---------------------------------------------------------------------------------------------------

    async def _event(self, event: dict[str, Any], state: dict[str, Any]) -> None:
        kind = event["type"]
        screen = self.screen
        if self.awaited is not None and kind in self.awaited[0]:
            self.awaited = None
        call_id = str(event.get("toolCallId"))
        if kind == "agent_start":
            self.running = True
        elif kind == "agent_end":
            self.running, self.aborting, self.streaming = False, False, None
            if event.get("reason") != "suspended":
                self.questions.clear()
            if event.get("reason") == "aborted":
                screen.note("  (turn aborted)")
        elif kind == "message_start":
            message = event.get("message") or {}
            if message.get("role") == "assistant":
                self.streaming = message.get("id")
            elif message.get("id") not in self.ours:  # a message sent elsewhere (or before this chat started)
                data = ((message.get("content") or {}).get("parts") or [{}])[0].get("data") or {}
                screen.line(f"> {_user_text(data.get('contents'))}")
        elif kind == "message_update":
            update = event.get("event") or {}
            if event.get("id") == self.streaming and update.get("type") == "text-delta":
                screen.write(str(update.get("delta", "")))
        elif kind == "message_end":
            if event.get("id") == self.streaming:
                self.streaming = None
                if screen.mid_line and screen.prompted is None:
                    screen.write("\n")
        elif kind == "tool_start":
            screen.note(f"  -> {event.get('toolName')}({short(event.get('args'))})")
        elif kind == "tool_end":
            name = event.get("toolName") or (state.get("activeTools", {}).get(call_id) or {}).get("name") or call_id
            if event.get("denied"):
                screen.note(f"  xx {name} declined: {short(event.get('result'))}")
            elif event.get("isError"):
                screen.line(f"  <- {name} failed: {short(_result(event.get('result')))}", screen.red)
            else:
                screen.note(f"  <- {name}: {short(_result(event.get('result')))}")
            self.questions.pop(("approval", call_id), None)
            self.questions.pop(("suspension", call_id), None)
        elif kind == "tool_approval_required":
            question = Question("approval", call_id, event.get("toolName", ""), event.get("args") or {})
            if not self.catching_up and question.key not in self.questions:
                question.category = await self._category(call_id)
            self.questions.setdefault(question.key, question)
        elif kind == "tool_suspended":
            self.questions.pop(("approval", call_id), None)  # approved, elsewhere if not here
            question = Question("suspension", call_id, event.get("toolName", ""), event.get("args") or {})
            question.payload = event.get("suspendPayload")
            self.questions.setdefault(question.key, question)
        elif kind == "tool_suspension_cancelled":
            self.questions.pop(("suspension", call_id), None)
            screen.note(f"  xx {event.get('toolName') or call_id}: {short(event.get('reason') or 'cancelled')}")
        elif kind == "mode_changed":
            screen.note(f"  * mode {event.get('previousModeId')} -> {event.get('modeId')}")
        elif kind == "model_changed":
            screen.note(f"  * model {event.get('modelId')}")
        elif kind == "thread_created":
            thread = event.get("thread") or {}
            screen.note(f"  * new thread {thread.get('id')}")
            self.thread_id = thread.get("id")
        elif kind == "thread_changed":
            screen.note(f"  * thread {event.get('threadId')}")
            self.thread_id = event.get("threadId")
            if not self.catching_up:
                await self._last_messages(self.thread_id)
        elif kind == "thread_deleted":
            screen.note(f"  * thread {event.get('threadId')} deleted")
        elif kind == "follow_up_queued":
            screen.note(f"  ({event.get('count')} message(s) wait for the next turn)")
        elif kind == "subagent_start":
            screen.note(f"  >> subagent {event.get('agentType')}: {short(event.get('task'))}")
        elif kind == "subagent_tool_start":
            screen.note(f"     -> {event.get('subToolName')}({short(event.get('subToolArgs'), 80)})")
        elif kind == "subagent_end":
            screen.note(f"  << subagent {event.get('agentType')}: {short(event.get('result'))}")
        elif kind == "goal_evaluation":
            payload = event.get("payload") or {}
            why = f": {payload['reason']}" if payload.get("reason") else ""
            screen.note(f"  * goal {payload.get('status')}{why}")
        elif kind == "info":
            screen.note(f"  i {short(event.get('message') or event)}")
        elif kind == "error":
            error = event.get("error") or {}
            screen.error(str(error.get("message") if isinstance(error, dict) else error))
        self.seen.save(self.session.id, event["offset"])
        if self.catching_up and event["offset"] >= self.catch_up_end - 1:
            await self._caught_up()


async def run_chat(
    keel: KeelClient,
    storage: Storage,
    definition: ControllerDefinition,
    *,
    resource_id: str,
    scope: str | None,
    thread_id: str | None,
    data_dir: Path,
    app_ref: str | None = None,
) -> int:
    """`keel chat`: attach to the session of (controller, resource, scope) and chat until the user leaves.
    Returns the exit code: 0 (/quit, Ctrl-D), 130 (Ctrl-C at the prompt). `app_ref` is the `--app` it was given:
    the command it prints on leaving comes back with it."""
    from keel.client.controller import ControllerClient

    controllers = ControllerClient(keel, storage, definition.id)
    session = await controllers.create_session(resource_id, scope, thread_id=thread_id)
    command = f"keel chat {definition.id} --resource {resource_id}" + (f" --scope {scope}" if scope else "")
    command += f" --app {app_ref}" if app_ref else ""
    chat = Chat(
        session,
        definition,
        SeenOffset(data_dir, definition.id, resource_id, scope),
        Screen(sys.stdout, echoes=sys.stdin.isatty()),
        interactive=sys.stdin.isatty(),
    )
    code = await chat.run()
    with contextlib.suppress(Exception):
        chat.screen.note(f"left the session (it stays; `{command}` comes back to it)")
    return code


async def list_sessions(
    keel: KeelClient, controller_id: str | None = None, resource_id: str | None = None, *, limit: int = 100
) -> list[dict[str, Any]]:
    """Open sessions (of one controller, of one resource), from visibility: what `ControllerClient.sessions`
    lists, for every controller when none is given, with the controller's id."""
    from keel.client.visibility import quoted
    from keel.workflows.search_attributes import KEEL_CONTROLLER_ID, KEEL_RESOURCE_ID, KEEL_STATUS, KEEL_THREAD_ID

    query = "KeelKind='session' AND CloseTime IS NULL"
    if controller_id is not None:
        query += f" AND KeelControllerId='{quoted(controller_id)}'"
    if resource_id is not None:
        query += f" AND KeelResourceId='{quoted(resource_id)}'"
    found = []
    async for ex in keel.temporal.list_workflows(query, limit=limit):
        attrs = ex.typed_search_attributes
        found.append(
            {
                "sessionId": ex.id,
                "controllerId": attrs.get(KEEL_CONTROLLER_ID),
                "resourceId": attrs.get(KEEL_RESOURCE_ID),
                "status": attrs.get(KEEL_STATUS),
                "threadId": attrs.get(KEEL_THREAD_ID),
                "startedAt": ex.start_time.isoformat() if ex.start_time else None,
            }
        )
    return found
