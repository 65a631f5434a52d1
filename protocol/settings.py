"""Keel's settings, in one place: every address and path derives from these (environment, then flags, which win).

    KEEL_DATA_DIR            .keel              the dev server's database and logs, storage, payloads, demo notes
    KEEL_TEMPORAL_ADDRESS    HOST:PORT          where clients and workers reach Temporal
    KEEL_TEMPORAL_HOST       127.0.0.1          } the local dev server's, and the address when
    KEEL_TEMPORAL_PORT       7233               } KEEL_TEMPORAL_ADDRESS is not set
    KEEL_UI_PORT             8233               the dev server's Web UI
    KEEL_NAMESPACE           default
    KEEL_TASK_QUEUE          keel
    KEEL_APP                 keel.app.demo:app  the app reference (module:attr)
    KEEL_STORAGE_URL         sqlite:///<KEEL_DATA_DIR>/keel.db
    KEEL_PAYLOAD_STORE       (follows the storage) where payloads of 256 KiB or more go
    KEEL_TRACE_RETENTION_HOURS 72               } the spans the storage exporter keeps (OTEL_TRACES_EXPORTER=keel):
    KEEL_TRACE_MAX_SPANS     100000             } those started less than 72 hours ago, 100000 at most
    KEEL_LOGS                off                the level from which a worker keeps its log records in storage
                                                (debug, info, warn, error), for /api/logs and `keel logs`
    KEEL_LOG_RETENTION_HOURS 72                 } the log records kept: those logged less than 72 hours ago,
    KEEL_LOG_MAX_RECORDS     100000             } 100000 at most
    KEEL_METRICS_PORT        (off)              a worker's Prometheus endpoint (`/metrics`): Temporal's and Keel's
    KEEL_METRICS_HOST        127.0.0.1          the address it listens on (0.0.0.0: every interface)

A contradiction (an address whose host or port differs from one set on its own) is an error naming both values.
`keel config` prints what is in effect and where each value came from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

Source = Literal["flag", "environment", "default", "derived"]
LogLevel = Literal["off", "debug", "info", "warn", "error"]
PREFIX = "KEEL_"


class SettingsError(ValueError):
    """Settings that contradict each other or cannot be parsed."""


def _integer(value: Any, low: int, high: int | None = None) -> int:
    span = f"from {low} to {high}" if high is not None else f"of {low} or more"
    try:
        number = int(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool) or number < low or (high is not None and number > high):
        raise ValueError(f"must be an integer {span}, not {value!r}")
    return number


def _port(value: Any) -> int:
    return _integer(value, 1, 65535)


def _count(value: Any) -> int:
    return _integer(value, 1)


def _positive(value: Any) -> float:
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = 0.0
    if isinstance(value, bool) or not number > 0:
        raise ValueError(f"must be a number above 0, not {value!r}")
    return number


def _log_level(value: Any) -> LogLevel:
    text = str(value).strip().lower() if value is not None else "off"
    level = {"": "off", "none": "off", "warning": "warn", "critical": "error"}.get(text, text)
    if level not in ("off", "debug", "info", "warn", "error"):
        raise ValueError(f"must be one of off, debug, info, warn, error, not {value!r}")
    return level  # type: ignore[return-value]


def _optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None or (isinstance(value, str) and not value.strip()) else parse(value)


_PARSE: dict[str, Callable[[Any], Any]] = {
    "data_dir": lambda value: Path(value),
    "temporal_port": _port,
    "ui_port": _port,
    "api_port": _port,
    "trace_retention_hours": _positive,
    "trace_max_spans": _count,
    "logs": _log_level,
    "log_retention_hours": _positive,
    "log_max_records": _count,
    "metrics_port": _optional(_port),
}
"""How a value from the environment or a flag becomes the field's; a field not named here is a string."""


@dataclass
class Settings:
    """Read from `KEEL_*` environment variables (any case); keyword arguments (the CLI's flags) override them.

    Plain data, parsed by hand: every `keel` command reads these, and pydantic would cost `keel runs` a third of
    its time (bench/cli_startup.py)."""

    data_dir: Path = Path(".keel")
    temporal_address: str | None = None
    temporal_host: str = "127.0.0.1"
    temporal_port: int = 7233
    ui_port: int = 8233
    api_host: str = "127.0.0.1"
    api_port: int = 4111
    api_keys: str | None = None
    """JSON `{"<key>": ["scope", ...]}`: the HTTP API's keys (`keel.client.api.auth`); none: no auth."""
    namespace: str = "default"
    task_queue: str = "keel"
    app: str = "keel.app.demo:app"
    storage_url: str | None = None
    payload_store: str | None = None
    trace_retention_hours: float = 72.0
    """The storage exporter's spans are deleted this long after they started (`keel.storage.spans`)."""
    trace_max_spans: int = 100_000
    """The storage exporter keeps at most this many spans, deleting the oldest first."""
    logs: LogLevel = "off"
    """The level from which a worker keeps its log records in storage (`keel.client.log_handler`); `off`: none."""
    log_retention_hours: float = 72.0
    log_max_records: int = 100_000
    metrics_port: int | None = None
    """A worker's Prometheus endpoint (`keel.client.metrics`); unset: no metrics, at no cost."""
    metrics_host: str = "127.0.0.1"
    _sources: dict[str, Source] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ui_url(self) -> str:
        return f"http://{self.temporal_host}:{self.ui_port}"

    def sources(self) -> dict[str, Source]:
        """Where each value came from: a flag, the environment, a default, or derived from other values."""
        return dict(self._sources)

    def as_json(self) -> dict[str, Any]:
        """Every setting by name, as JSON values (paths as strings)."""
        return {name: str(v) if isinstance(v := getattr(self, name), Path) else v for name in NAMES}


NAMES = tuple(f.name for f in fields(Settings) if not f.name.startswith("_"))


def load_settings(**flags: Any) -> Settings:
    """The settings in effect: the environment, overridden by `flags` that are not None (the CLI's options).

    Raises:
        SettingsError: contradictory or malformed values, with every problem named.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = sorted(set(given) - set(NAMES))
    if unknown:
        raise TypeError(f"Unknown settings: {', '.join(unknown)}")
    env = {
        name: value
        for key, value in os.environ.items()
        if key[: len(PREFIX)].upper() == PREFIX and (name := key[len(PREFIX) :].lower()) in NAMES
    }
    values: dict[str, Any] = {}
    problems = []
    for name, raw in (env | given).items():
        try:
            values[name] = _PARSE.get(name, str)(raw)
        except ValueError as err:  # named as the user gave it: a flag (or argument) by name, else the variable
            problems.append(f"{name if name in given else PREFIX + name.upper()} {err}")
    settings = Settings(**values)
    if not problems:
        try:
            _derive(settings, set(values))
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise SettingsError(f"Invalid settings: {'; '.join(problems)}")
    for name in NAMES:
        settings._sources[name] = (
            "flag" if name in given
            else "environment" if name in env
            else "derived" if name in _DERIVED or (name in _FROM_ADDRESS and "temporal_address" in values)
            else "default"
        )  # fmt: skip
    return settings


def _derive(settings: Settings, set_here: set[str]) -> None:
    """The values that follow from others: the data dir made absolute, the Temporal address from its host and port
    (or those from the address, which may not contradict them), the SQLite storage in the data dir."""
    settings.data_dir = settings.data_dir.expanduser().absolute()
    if settings.temporal_address is None:
        settings.temporal_address = f"{settings.temporal_host}:{settings.temporal_port}"
    else:
        host, _, port = settings.temporal_address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"KEEL_TEMPORAL_ADDRESS must be HOST:PORT, not {settings.temporal_address!r}")
        for name, given, derived in (
            ("port", str(settings.temporal_port), port),
            ("host", settings.temporal_host, host),
        ):
            if f"temporal_{name}" in set_here and given != derived:
                raise ValueError(
                    f"KEEL_TEMPORAL_ADDRESS is {settings.temporal_address} but KEEL_TEMPORAL_{name.upper()} is "
                    f"{given}: set only one of them, or make them agree"
                )
        settings.temporal_host, settings.temporal_port = host, int(port)
    if settings.storage_url is None:
        settings.storage_url = f"sqlite:///{settings.data_dir / 'keel.db'}"


_DERIVED = {"temporal_address", "storage_url"}
_FROM_ADDRESS = {"temporal_host", "temporal_port"}
