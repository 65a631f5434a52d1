"""OpenTelemetry tracing: the exporters the standard `OTEL_*` variables name, and Keel's own spans.

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`, `keel`, or any installed
`opentelemetry_traces_exporter` entry point; `keel`, registered by `keel.client.tracing`, keeps spans in Keel's
storage: `keel.client.span_exporter`) and `OTEL_SDK_DISABLED` is not `true`; unset or `none`, it is off,
and then nothing here imports OpenTelemetry or makes a span: the helpers hand back a shared no-op.

`configure()` sets the process's tracer provider once: a `BatchSpanProcessor` per exporter, `otlp` sent over
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `grpc`).
Everything else is read by the SDK and the exporters themselves: endpoint, headers, timeout and compression
(`OTEL_EXPORTER_OTLP_*`), `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, the sampler, the batch delay and
sizes (`OTEL_BSP_*`). A process that set its own SDK tracer provider keeps it: Keel adds no exporter to it.
`configure()` also instruments httpx (the model servers' requests, under their model call's span) and asyncpg
(PostgreSQL storage's queries) when they are imported and their instrumentations installed
(`INSTRUMENTED_LIBRARIES`; `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=httpx,asyncpg` leaves them out); with tracing
off neither instrumentation is imported. `shutdown()` exports what is buffered (the worker and the `keel` command
call it before they exit).

Keel's spans, made inside activities (workflow code, which replays, hands its few to the worker's tracing
interceptor: `WorkflowSpan`): `model_call` (one per model call, GenAI semantic conventions: `chat {model}` with
the model, provider, token counts and finish reasons; prompt and completion only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, at most `MAX_CONTENT_CHARS` each), `tool_call`
(`execute_tool {name}`, error status when the tool failed), `workspace_operation` (the workspace call under a
workspace tool's span, an indexing pass), and the wait for an approval (`approval {tool}`, with the decision).

No attribute carries a secret by construction (no request headers, no keys, tool arguments and results only
when content capture is on). As a second guard, the exporters `configure()` sets up drop captured credential
headers (`Authorization`, `x-api-key`, cookies: when `OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_*` asks for
them) and replace, in every string they send, the values of secret-named environment variables (`*_API_KEY`,
`*TOKEN*`, `*SECRET*`, ...), the OTLP headers' values, the HTTP API's keys, the keys models were given
(`add_secret`) and bearer tokens.

OpenTelemetry is imported on first use: the `keel` commands that talk to Temporal check `enabled()` and load
none of it when tracing is off.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span, SpanKind, Tracer
    from opentelemetry.util.types import AttributeValue

    from keel.protocol.messages import MessageRecord, Usage

TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
DEFAULT_SERVICE_NAME = "keel"
"""The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` gives one."""
MAX_CONTENT_CHARS = 16 * 1024
"""Captured content (a prompt, a completion, tool arguments or a result, as JSON) is cut to this many characters."""
MAX_ERROR_CHARS = 1024
MAX_ATTRIBUTE_CHARS = 32 * 1024
"""Any span attribute's value is cut to this many characters unless `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` (or
`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) says otherwise: an HTTP request's 100,000-character query string went whole
into its span. Above `MAX_CONTENT_CHARS`, so captured content keeps its own cut and its note."""
_OTLP_EXPORTERS = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
_FINISH_REASONS = {"tool-calls": "tool_calls", "content-filter": "content_filter"}
"""Keel's (Mastra's) finish reasons as the GenAI conventions spell them (OpenAI's)."""


# --- on or off -------------------------------------------------------------------------------------------------


def exporter_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The exporters `OTEL_TRACES_EXPORTER` names (comma-separated; `none` names none), in `environ` (default
    this process's)."""
    given = (os.environ if environ is None else environ).get(TRACES_EXPORTER, "")
    names = [n.strip().lower() for n in given.split(",")]  # case-insensitive
    return list(dict.fromkeys(n for n in names if n and n != "none"))  # each once (`OTLP,otlp` exported twice)


def enabled() -> bool:
    """Whether tracing is on: `OTEL_TRACES_EXPORTER` names an exporter and `OTEL_SDK_DISABLED` is not `true`."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(exporter_names())


def capture_content() -> bool:
    """Prompts, completions, tool arguments and results go on spans (`...CAPTURE_MESSAGE_CONTENT=true`)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


# --- the provider ----------------------------------------------------------------------------------------------

_lock = threading.Lock()
_provider: TracerProvider | None = None
_configured = False


def configure() -> None:
    """When tracing is on, give the process a tracer provider with the exporters the environment names (once;
    a provider the process already set is kept as it is). Raises `SettingsError` (a `ValueError`) for an OTLP
    protocol other than `http/protobuf` or `grpc`, or an exporter name nothing installed provides."""
    global _provider, _configured
    if not enabled():
        return
    with _lock:
        if _configured:
            return
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        if not isinstance(trace.get_tracer_provider(), TracerProvider):
            _provider = build_provider()
            trace.set_tracer_provider(_provider)
        _instrument_libraries()
        _configured = True


INSTRUMENTED_LIBRARIES = ("httpx", "asyncpg")
"""Libraries whose calls are spans with tracing on (unless `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS` names them):
httpx's requests (the model servers'), asyncpg's queries (PostgreSQL storage's, their SQL without parameters)."""


def _instrument_libraries() -> None:
    """Instrument each of `INSTRUMENTED_LIBRARIES` when it is imported (at once if it is already; never if it
    never is), if its instrumentation is installed."""
    try:
        import wrapt
    except ImportError:  # no instrumentation installed (they need wrapt)
        return
    disabled = {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}
    # The stable HTTP conventions (`http.request.method`, `url.full`, ...), as FastAPI's server spans have them,
    # unless the process chose otherwise.
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    for library in INSTRUMENTED_LIBRARIES:
        if library not in disabled:
            wrapt.register_post_import_hook(_instrument, library)


def _instrument(module: Any) -> None:
    try:
        if module.__name__ == "httpx":
            from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

            HTTPXClientInstrumentor().instrument()
        elif module.__name__ == "asyncpg":
            from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

            AsyncPGInstrumentor().instrument()  # type: ignore[no-untyped-call]
    except ImportError:  # that library's instrumentation is not installed
        return


def build_provider(names: Sequence[str] | None = None) -> TracerProvider:
    """A tracer provider exporting to `names` (default: the environment's), through batch processors."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    from opentelemetry.sdk.trace import SpanLimits

    bounded = not any(
        os.environ.get(v) for v in ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    )
    limits = SpanLimits(max_span_attribute_length=MAX_ATTRIBUTE_CHARS) if bounded else None  # else the variables'
    provider = TracerProvider(resource=resource, span_limits=limits)
    for name in exporter_names() if names is None else names:
        provider.add_span_processor(BatchSpanProcessor(redacting(_exporter(name))))
    return provider


_factories: dict[str, Callable[[], SpanExporter]] = {}


def register_exporter(name: str, factory: Callable[[], SpanExporter]) -> None:
    """Make `name` in `OTEL_TRACES_EXPORTER` build its exporter with `factory` (a layer above this one provides
    it: `keel.client.tracing` registers `keel`, the storage exporter). Wins over an entry point of that name."""
    _factories[name] = factory


def _exporter(name: str) -> SpanExporter:
    from importlib.metadata import entry_points

    from keel.protocol.settings import SettingsError  # a bad setting: `keel` commands report it on one line

    if name in _factories:
        return _factories[name]()
    if name == "otlp":
        protocol = (
            (
                os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            )
            .strip()
            .lower()
        )
        if protocol not in _OTLP_EXPORTERS:
            raise SettingsError(f"OTLP protocol {protocol!r} is not supported: use http/protobuf or grpc")
        name = _OTLP_EXPORTERS[protocol]
    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        raise SettingsError(
            f"{TRACES_EXPORTER} names {name!r}, which no installed package provides (otlp, console, keel or none)"
        )
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


def flush() -> None:
    """Export the spans buffered so far (blocking, up to the processors' timeout); nothing when tracing is off."""
    if enabled() and _configured:
        from opentelemetry import trace

        force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if force_flush is not None:
            force_flush()


def shutdown(timeout: float | None = None) -> bool:
    """Export what is buffered and stop the exporters `configure()` set up (before the process exits: the worker
    and the `keel` command end with `os._exit`, which runs no exit handler). With `timeout`, give up after so many
    seconds (an exporter retries an endpoint that does not answer for 10 s: a short command waited for it);
    False then."""
    global _provider
    provider, _provider = _provider, None
    stop = provider.shutdown if provider is not None else flush
    if timeout is None:
        stop()
        return True
    done = threading.Thread(target=stop, daemon=True, name="keel-tracing-shutdown")
    done.start()
    done.join(timeout)
    return not done.is_alive()


# --- a step's attempt ------------------------------------------------------------------------------------------

ATTEMPT_ATTRIBUTE = "temporalActivityAttempt"
"""The attempt on an activity's `RunActivity` span (Temporal's, put there by Keel's tracing interceptor)."""


def mark_attempt(attempt: int) -> None:
    """Put `attempt` on the current span (a step's `RunActivity`), when tracing is on: a local step lost with its
    worker runs again at Temporal's attempt 1, and only storage knows it ran before."""
    if not enabled():
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(ATTEMPT_ATTRIBUTE, attempt)


# --- secrets ---------------------------------------------------------------------------------------------------

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)", re.IGNORECASE)
_BEARER = re.compile(r"(?i)\b(bearer)\s+(?=[\w.~+/=-]*\d)[\w.~+/=-]{12,}")
"""A bearer token (12 characters or more, a digit among them: not the word in a sentence)."""
_MIN_SECRET_CHARS = 8
_added_secrets: set[str] = set()


def add_secret(value: str | None) -> None:
    """Never export `value` (a key a model or a client was given in code rather than in the environment)."""
    if value and len(value) >= _MIN_SECRET_CHARS:
        _added_secrets.add(value)


def _secrets() -> list[str]:
    found = set(_added_secrets)
    for name, value in os.environ.items():
        if name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
            found.update(unquote(v.split("=", 1)[1]).strip() for v in value.split(",") if "=" in v)
        elif name == "KEEL_API_KEYS" and value.lstrip().startswith("{"):
            with contextlib.suppress(ValueError, AttributeError):
                found.update(str(key) for key in json.loads(value))
        elif _SECRET_NAME.search(name):
            found.add(value.strip())
    # The longest first: a key that contains another is replaced whole.
    return sorted((s for s in found if len(s) >= _MIN_SECRET_CHARS), key=len, reverse=True)


def known_secrets() -> list[str]:
    """The secrets `redacted` replaces, as it finds them now (pass them to it for many strings in a row)."""
    return _secrets()


def redacted(text: str, secrets: Sequence[str] | None = None) -> str:
    """`text` with every known secret and bearer token replaced by `[REDACTED]`, also one percent-encoded (a URL's
    query: then the text is given decoded, the secret replaced)."""
    secrets = _secrets() if secrets is None else secrets
    text = _replaced(text, secrets)
    for _ in range(_MAX_ENCODINGS):
        decoded = unquote(text) if "%" in text else text
        if decoded == text or not _holds_secret(decoded, secrets):
            break
        text = _replaced(decoded, secrets)
    return text


_MAX_ENCODINGS = 3
"""How many times over a secret is looked for percent-encoded (a URL inside a URL's query is encoded twice)."""


def _replaced(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


@lru_cache(maxsize=16)
def _secret_finder(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(re.escape(s) for s in secrets)) if secrets else None


def _holds_secret(text: str, secrets: Sequence[str]) -> bool:
    """Whether `redacted` would change `text`: two scans in C, no copy (most strings hold nothing; the check of
    every exported span's strings was ~8 % of a traced worker's CPU when it replaced instead, bench/README.md),
    and the same of its percent-decoded forms when it holds a `%`."""
    finder = _secret_finder(tuple(secrets))
    for _ in range(_MAX_ENCODINGS + 1):
        if (finder is not None and finder.search(text)) or _BEARER.search(text):
            return True
        decoded = unquote(text) if "%" in text else text
        if decoded == text:
            return False
        text = decoded
    return False


def redacting(inner: SpanExporter) -> SpanExporter:
    """`inner`, sending every string attribute, event attribute and status description `redacted` (what
    `configure()` wraps its exporters in; wrap yours in it too when you set the tracer provider yourself)."""
    from opentelemetry.sdk.trace.export import SpanExporter

    class Redacting(SpanExporter):  # defined here: the SDK is imported only once tracing is on
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            secrets = _secrets()
            return inner.export([_redacted_span(s, secrets) for s in spans])

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return Redacting()


def _strings(attributes: Mapping[str, Any] | None) -> Iterator[str]:
    for value in (attributes or {}).values():
        if isinstance(value, str):
            yield value
        elif isinstance(value, tuple | list):
            yield from (v for v in value if isinstance(v, str))


def _redacted_attributes(attributes: Mapping[str, Any] | None, secrets: Sequence[str]) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return redacted(value, secrets)
        if isinstance(value, tuple | list):
            return tuple(redacted(v, secrets) if isinstance(v, str) else v for v in value)
        return value

    return {key: clean(value) for key, value in (attributes or {}).items()}


_SECRET_HEADER = re.compile(
    r"^http\.(request|response)\.header\.(authorization|proxy[_-]authorization|x[_-]api[_-]key|api[_-]key|cookie|"
    r"set[_-]cookie)$",
    re.IGNORECASE,
)
"""Captured headers (`OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_*`) that carry credentials: never exported."""


def _redacted_span(span: ReadableSpan, secrets: Sequence[str]) -> ReadableSpan:
    """`span`, or a copy of it with its strings `redacted` (and no credential header) when one of them holds a
    secret."""
    headers = [key for key in (span.attributes or {}) if _SECRET_HEADER.match(key)]
    strings = [
        *_strings(span.attributes),
        *(s for event in span.events for s in _strings(event.attributes)),
        *(s for link in span.links for s in _strings(link.attributes)),
        span.status.description or "",
    ]
    if not headers and not any(_holds_secret(s, secrets) for s in strings):
        return span
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Link, Status

    description = span.status.description
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_redacted_attributes(
            {k: v for k, v in (span.attributes or {}).items() if k not in headers}, secrets
        ),
        events=[Event(e.name, _redacted_attributes(e.attributes, secrets), e.timestamp) for e in span.events],
        links=[Link(link.context, _redacted_attributes(link.attributes, secrets)) for link in span.links],
        kind=span.kind,
        status=Status(span.status.status_code, redacted(description, secrets)) if description else span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


# --- spans from workflow code ---------------------------------------------------------------------------------

WORKFLOW_SPAN_EXTERN = "__keel_opentelemetry_workflow_span"
"""The extern function (Temporal's `workflow.extern_functions()`) through which workflow code hands a finished
span to the worker's tracing interceptor (`keel.client.tracing_interceptor`); absent when tracing is off."""
WORKFLOW_SPAN_START_EXTERN = "__keel_opentelemetry_workflow_span_start"
"""The extern function that tells the interceptor a span's `key` starts now (workflow time is the workflow task's
start, before the local activities the task ran): the span then runs from this moment to when it is handed over,
by the worker's clock, if the same worker sees both; otherwise by the workflow times it is given."""


class WorkflowSpan(NamedTuple):
    """A span workflow code made (the wait for an approval), handed over once it has ended, never while the
    workflow replays: the interceptor makes it, under the run's trace context (from `headers`), from `start_ns` to
    `end_ns` (workflow time) unless it saw `key` start. `content` goes on it only when content capture is on."""

    key: str
    name: str
    start_ns: int
    end_ns: int
    headers: Mapping[str, Any]
    attributes: Mapping[str, str | int | bool]
    content: Mapping[str, str]


# --- Keel's spans ----------------------------------------------------------------------------------------------


class ToolCallLike(Protocol):
    """A tool call a model asked for (`keel.model_providers.ModelToolCall`)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def args(self) -> dict[str, Any]: ...


@cache
def _tracer() -> Tracer:
    from opentelemetry import trace

    # A proxy until a provider is set, which then answers through it.
    return trace.get_tracer("keel")


def _bounded(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[{len(text) - limit} more characters]"


def _json(value: Any) -> str:
    return _bounded(json.dumps(value, default=str, ensure_ascii=False))


class _Recorder:
    """A span's recorder; with no span (tracing off) every method does nothing."""

    def __init__(self, span: Span | None) -> None:
        self.span = span if span is not None and span.is_recording() else None
        self.has_failed = False

    def set(self, key: str, value: AttributeValue | None) -> None:
        if self.span is not None and value is not None:
            self.span.set_attribute(key, value)

    def failed(self, err: BaseException, *, error_type: str | None = None) -> None:
        """Mark the span failed: `error.type`, an error status with the message, and the exception as an event."""
        if self.span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        kind = error_type or getattr(err, "error_name", None) or type(err).__qualname__
        self.span.set_attribute("error.type", kind)
        self.span.set_status(Status(StatusCode.ERROR, _bounded(f"{kind}: {err}", MAX_ERROR_CHARS)))
        self.span.record_exception(err)
        self.has_failed = True


class ModelCall(_Recorder):
    """What one model call asked and answered, on its `chat {model}` span."""

    def request(self, instructions: str, messages: Sequence[MessageRecord]) -> None:
        if self.span is None or not capture_content():
            return
        if instructions:
            self.set("gen_ai.system_instructions", _json([{"type": "text", "content": instructions}]))
        self.set("gen_ai.input.messages", _json([_message(m) for m in messages]))

    def response(self, text: str, tool_calls: Sequence[ToolCallLike], finish_reason: str, usage: Usage | None) -> None:
        if self.span is None:
            return
        reason = _FINISH_REASONS.get(finish_reason, finish_reason)
        self.set("gen_ai.response.finish_reasons", (reason,))
        if usage is not None:
            self.set("gen_ai.usage.input_tokens", usage.input_tokens)
            self.set("gen_ai.usage.output_tokens", usage.output_tokens)
        if capture_content():
            parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
            parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.args} for c in tool_calls]
            output = [{"role": "assistant", "parts": parts, "finish_reason": reason}]
            self.set("gen_ai.output.messages", _json(output))


class ToolCall(_Recorder):
    """One tool call's arguments and outcome, on its `execute_tool {name}` span."""

    def arguments(self, args: Mapping[str, Any]) -> None:
        if self.span is not None and capture_content():
            self.set("gen_ai.tool.call.arguments", _json(args))

    def result(self, result: Any, *, is_error: bool) -> None:
        if self.span is None:
            return
        if capture_content():
            self.set("gen_ai.tool.call.result", _json(result))
        if is_error and not self.has_failed:  # a result that is an error: a tool's own, or one Keel made
            from opentelemetry.trace import Status, StatusCode

            message = result.get("error") if isinstance(result, dict) else result
            self.span.set_attribute("error.type", "tool_error")
            self.span.set_status(Status(StatusCode.ERROR, _bounded(str(message), MAX_ERROR_CHARS)))

    def suspended(self) -> None:
        self.set("keel.tool.suspended", True)


_OFF_MODEL_CALL = contextlib.nullcontext(ModelCall(None))
_OFF_TOOL_CALL = contextlib.nullcontext(ToolCall(None))
_OFF = contextlib.nullcontext(_Recorder(None))


def model_call(
    model_id: str,
    *,
    run_id: str | None = None,
    step: int | None = None,
    agent_id: str | None = None,
    thread_id: str | None = None,
    server_url: str | None = None,
) -> contextlib.AbstractContextManager[ModelCall]:
    """The span of one model call: `chat {model}` for `model_id` (`provider/model`), a client span."""
    if not enabled():
        return _OFF_MODEL_CALL
    from opentelemetry.trace import SpanKind

    provider, _, model = model_id.partition("/")
    model = model or provider
    attributes: dict[str, AttributeValue | None] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.model": model,
        "gen_ai.agent.id": agent_id,
        "gen_ai.agent.name": agent_id,
        "gen_ai.conversation.id": thread_id,
        "keel.run.id": run_id,
        "keel.step": step,
    }
    if server_url:
        url = urlsplit(server_url)  # host and port only: never the userinfo or the query
        attributes["server.address"] = url.hostname
        attributes["server.port"] = url.port or (443 if url.scheme == "https" else 80)
    return _spanning(ModelCall, f"chat {model}", SpanKind.CLIENT, attributes)


def tool_call(
    tool_name: str,
    call_id: str,
    *,
    run_id: str | None = None,
    step: int | None = None,
    agent_id: str | None = None,
    attempt: int | None = None,
    workflow_id: str | None = None,
) -> contextlib.AbstractContextManager[ToolCall]:
    """The span of one tool call: `execute_tool {name}`."""
    if not enabled():
        return _OFF_TOOL_CALL
    from opentelemetry.trace import SpanKind

    attributes: dict[str, AttributeValue | None] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.agent.id": agent_id,
        "keel.run.id": run_id,
        "keel.step": step,
        "keel.tool.attempt": attempt,
        "keel.workflow.id": workflow_id,
    }
    return _spanning(ToolCall, f"execute_tool {tool_name}", SpanKind.INTERNAL, attributes)


def workspace_operation(
    operation: str, *, workspace_id: str, capability: str | None = None, path: Any = None
) -> contextlib.AbstractContextManager[_Recorder]:
    """The span of a workspace operation (`workspace {operation}`): a workspace tool's call, an indexing pass."""
    if not enabled():
        return _OFF
    from opentelemetry.trace import SpanKind

    attributes: dict[str, AttributeValue | None] = {
        "keel.workspace.id": workspace_id,
        "keel.workspace.operation": operation,
        "keel.workspace.capability": capability,
        "file.path": path if isinstance(path, str) else None,
    }
    name = f"workspace {operation.removeprefix('mastra_workspace_')}"
    return _spanning(_Recorder, name, SpanKind.INTERNAL, attributes)


R = TypeVar("R", bound=_Recorder)


@contextlib.contextmanager
def _spanning(
    recorder: type[R], name: str, kind: SpanKind, attributes: Mapping[str, AttributeValue | None]
) -> Iterator[R]:
    given = {key: value for key, value in attributes.items() if value is not None}
    with _tracer().start_as_current_span(
        name, kind=kind, attributes=given, record_exception=False, set_status_on_exception=False
    ) as span:
        found = recorder(span)
        try:
            yield found
        except BaseException as err:
            if not found.has_failed:  # the first failure is the cause; what it became says less
                found.failed(err)
            raise


def _message(message: MessageRecord) -> dict[str, Any]:
    """A message as the GenAI conventions' `gen_ai.input.messages` shape it: a role and typed parts."""
    if isinstance(message.content, str):
        return {"role": message.role, "parts": [{"type": "text", "content": message.content}]}
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if part.type == "text":
            parts.append({"type": "text", "content": part.text})
        elif part.type == "tool-call":
            parts.append({"type": "tool_call", "id": part.tool_call_id, "name": part.tool_name, "arguments": part.args})
        else:
            parts.append({"type": "tool_call_response", "id": part.tool_call_id, "response": part.result})
    return {"role": message.role, "parts": parts}


__all__ = [
    "CAPTURE_CONTENT",
    "DEFAULT_SERVICE_NAME",
    "INSTRUMENTED_LIBRARIES",
    "MAX_CONTENT_CHARS",
    "REDACTED",
    "TRACES_EXPORTER",
    "WORKFLOW_SPAN_EXTERN",
    "WORKFLOW_SPAN_START_EXTERN",
    "ModelCall",
    "ToolCall",
    "ToolCallLike",
    "WorkflowSpan",
    "add_secret",
    "build_provider",
    "capture_content",
    "configure",
    "enabled",
    "exporter_names",
    "flush",
    "known_secrets",
    "model_call",
    "redacted",
    "redacting",
    "register_exporter",
    "shutdown",
    "tool_call",
    "workspace_operation",
]
