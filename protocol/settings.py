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
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Source = Literal["flag", "environment", "default", "derived"]


class SettingsError(ValueError):
    """Settings that contradict each other or cannot be parsed."""


class Settings(BaseSettings):
    """Read from `KEEL_*` environment variables; keyword arguments (the CLI's flags) override them."""

    model_config = SettingsConfigDict(env_prefix="KEEL_", extra="ignore", validate_default=True)

    data_dir: Path = Path(".keel")
    temporal_address: str | None = None
    temporal_host: str = "127.0.0.1"
    temporal_port: int = Field(default=7233, ge=1, le=65535)
    ui_port: int = Field(default=8233, ge=1, le=65535)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=4111, ge=1, le=65535)
    api_keys: str | None = None
    """JSON `{"<key>": ["scope", ...]}`: the HTTP API's keys (`keel.client.api.auth`); none: no auth."""
    namespace: str = "default"
    task_queue: str = "keel"
    app: str = "keel.app.demo:app"
    storage_url: str | None = None
    payload_store: str | None = None
    trace_retention_hours: float = Field(default=72, gt=0)
    """The storage exporter's spans are deleted this long after they started (`keel.storage.spans`)."""
    trace_max_spans: int = Field(default=100_000, ge=1)
    """The storage exporter keeps at most this many spans, deleting the oldest first."""
    logs: Literal["off", "debug", "info", "warn", "error"] = "off"
    """The level from which a worker keeps its log records in storage (`keel.client.log_handler`); `off`: none."""
    log_retention_hours: float = Field(default=72, gt=0)
    log_max_records: int = Field(default=100_000, ge=1)
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """A worker's Prometheus endpoint (`keel.client.metrics`); unset: no metrics, at no cost."""
    metrics_host: str = "127.0.0.1"

    @field_validator("logs", mode="before")
    @classmethod
    def _log_level(cls, value: Any) -> Any:
        text = str(value).strip().lower() if value is not None else "off"
        return {"": "off", "none": "off", "warning": "warn", "critical": "error"}.get(text, text)

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        self.data_dir = self.data_dir.expanduser().absolute()
        if self.temporal_address is None:
            self.temporal_address = f"{self.temporal_host}:{self.temporal_port}"
        else:
            host, _, port = self.temporal_address.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"KEEL_TEMPORAL_ADDRESS must be HOST:PORT, not {self.temporal_address!r}")
            for name, given, derived in (("port", str(self.temporal_port), port), ("host", self.temporal_host, host)):
                if f"temporal_{name}" in self.model_fields_set and given != derived:
                    raise ValueError(
                        f"KEEL_TEMPORAL_ADDRESS is {self.temporal_address} but KEEL_TEMPORAL_{name.upper()} is "
                        f"{given}: set only one of them, or make them agree"
                    )
            self.temporal_host, self.temporal_port = host, int(port)
        if self.storage_url is None:
            self.storage_url = f"sqlite:///{self.data_dir / 'keel.db'}"
        return self

    @property
    def ui_url(self) -> str:
        return f"http://{self.temporal_host}:{self.ui_port}"

    def sources(self) -> dict[str, Source]:
        """Where each value came from: a flag, the environment, a default, or derived from other values."""
        return dict(self._sources)

    _sources: dict[str, Source] = PrivateAttr(default_factory=dict)


def load_settings(**flags: Any) -> Settings:
    """The settings in effect: the environment, overridden by `flags` that are not None (the CLI's options).

    Raises:
        SettingsError: contradictory or malformed values, with every problem named.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        settings = Settings(**given)
    except ValidationError as err:
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors(include_url=False))
        raise SettingsError(f"Invalid settings: {problems}") from None
    env = {name for name in Settings.model_fields if f"KEEL_{name.upper()}" in os.environ}
    for name in Settings.model_fields:
        settings._sources[name] = (
            "flag" if name in given
            else "environment" if name in env
            else "derived" if name in _DERIVED or (name in _FROM_ADDRESS and "temporal_address" in env | set(given))
            else "default"
        )  # fmt: skip
    return settings


_DERIVED = {"temporal_address", "storage_url"}
_FROM_ADDRESS = {"temporal_host", "temporal_port"}
