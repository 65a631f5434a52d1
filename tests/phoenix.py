"""Arize Phoenix for the tests: one per session (tests/test_phoenix.py), installed into its own virtualenv inside
.venv on first use (`keel.client.phoenix_server`), with its own SQLite working directory and free ports; spans read
back through Phoenix's own REST API (`GET /v1/projects/{project}/spans`), as Phoenix stored and interpreted them
(its span kinds: LLM and TOOL for the GenAI spans; token counts as `llm.token_count.*`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from keel.client.phoenix_server import PROJECT_ATTRIBUTE, LocalPhoenix, RunningPhoenix, install_phoenix
from tests.conftest import free_port


@contextmanager
def phoenix_server(directory: Path) -> Iterator[RunningPhoenix]:
    command = install_phoenix()
    server = LocalPhoenix(directory, free_port())
    running = server.start(command)
    try:
        yield running
    finally:
        server.stop()


@dataclass(frozen=True)
class PhoenixProject:
    """A project of its own for one test: the processes it starts send their spans there (`env()`)."""

    phoenix: RunningPhoenix
    name: str

    @classmethod
    def new(cls, phoenix: RunningPhoenix) -> PhoenixProject:
        return cls(phoenix, f"keel-test-{uuid.uuid4().hex[:12]}")

    def env(self, service: str) -> dict[str, str]:
        """OTLP/HTTP to Phoenix (`OTEL_EXPORTER_OTLP_ENDPOINT`), into this project, exported every 100 ms."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.phoenix.url,
            "OTEL_SERVICE_NAME": service,
            "OTEL_RESOURCE_ATTRIBUTES": f"{PROJECT_ATTRIBUTE}={self.name}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }

    async def spans(self) -> list[dict[str, Any]]:
        """Every span Phoenix holds for the project (none while it has no project of that name)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        async with httpx.AsyncClient(base_url=self.phoenix.url, timeout=30) as http:
            while True:
                params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
                answer = await http.get(f"/v1/projects/{self.name}/spans", params=params)
                if answer.status_code == 404:
                    return []
                answer.raise_for_status()
                body = answer.json()
                found += body["data"]
                cursor = body.get("next_cursor")
                if not cursor:
                    return found

    async def traces(self) -> list[dict[str, Any]]:
        """Phoenix's own rows for the project's traces (with the token counts it summed)."""
        async with httpx.AsyncClient(base_url=self.phoenix.url, timeout=30) as http:
            answer = await http.get(f"/v1/projects/{self.name}/traces", params={"limit": 100})
            answer.raise_for_status()
            rows: list[dict[str, Any]] = answer.json()["data"]
            return rows

    async def wait_for(self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 30) -> list[dict[str, Any]]:
        """The project's spans once `done(spans)` holds and two reads a moment apart agree (ingestion is
        asynchronous); AssertionError with what arrived, after `timeout`."""
        spans: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    spans = await self.spans()
                    if done(spans):
                        await asyncio.sleep(0.5)
                        again = await self.spans()
                        if len(again) == len(spans):
                            return again
                    await asyncio.sleep(0.2)
        except TimeoutError:
            raise AssertionError(f"Phoenix has {sorted(s['name'] for s in spans)}") from None


def at(span: dict[str, Any], which: str) -> datetime:
    """A span's `start_time` or `end_time` (Phoenix's ISO 8601, without microseconds when they are 0)."""
    return datetime.fromisoformat(span[which])


class Tree:
    """Spans as Phoenix returns them, by id, with their parents and the traces they form."""

    def __init__(self, spans: list[dict[str, Any]]) -> None:
        self.spans = spans
        self.by_id = {s["context"]["span_id"]: s for s in spans}

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]

    def one(self, name: str) -> dict[str, Any]:
        [found] = self.named(name)
        return found

    def one_of(self, spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
        [found] = [s for s in spans if s["name"] == name]
        return found

    def parent(self, span: dict[str, Any]) -> dict[str, Any]:
        assert span["parent_id"] in self.by_id, f"{span['name']} has no parent among the spans"
        return self.by_id[span["parent_id"]]

    def ancestors(self, span: dict[str, Any]) -> list[str]:
        """The names from `span`'s parent up to its trace's root."""
        names = []
        while span["parent_id"] in self.by_id:
            span = self.by_id[span["parent_id"]]
            names.append(span["name"])
        return names

    def trace_of(self, span: dict[str, Any]) -> list[dict[str, Any]]:
        trace_id = span["context"]["trace_id"]
        return [s for s in self.spans if s["context"]["trace_id"] == trace_id]

    def roots(self, spans: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        return [s for s in (self.spans if spans is None else spans) if s["parent_id"] not in self.by_id]


__all__ = ["PhoenixProject", "Tree", "at", "phoenix_server"]
