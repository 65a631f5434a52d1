"""The `@mastra/client-js` workspace calls (tests/http_api/js/workspace_calls.mjs: the workspaces listed and
described, files written, read, stat'ed, listed and deleted, content indexed and searched, skills listed, read and
searched, and their mistakes) answered by Keel as Mastra's own server answers them for the same app: its answers,
recorded by bench/mastra/workspace_http_record.mjs, are tests/fixtures/mastra_workspace_http.json.

Keel differs on purpose where `DIFFERENCES` says, and nowhere else."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.http_api.conftest import Api
from tests.http_api.workspace_app import FILES_DIR

ROOT = Path(__file__).resolve().parents[2]
CALLS = ROOT / "tests" / "http_api" / "js" / "workspace_calls.mjs"
RECORDED = json.loads((ROOT / "tests" / "fixtures" / "mastra_workspace_http.json").read_text())
MASTRA: dict[str, Any] = RECORDED["calls"]

UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b")
FS_ID = re.compile(r"\blocal-fs-[0-9a-z]+-[0-9a-z]+\b")

KEEL_STATUS = {"delete_not_empty": 409}
"""Mastra's server answers deleting a non-empty directory without `recursive` with a 500; Keel with the caller's
409 (the directory's state conflicts with the request), the message the same."""

DIFFERENCES = {
    "status": "Mastra shows an agent's workspace (and its filesystem) `pending` until something calls its `init()`; "
    "Keel shows `ready`: a worker initialises the workspaces it hosts before it polls, and the API process needs "
    "no started copy to serve them (client/api/workspaces.py `_status`).",
    "skills_search": "A Mastra workspace's skills share its search engine, so a skill search scores against the "
    "content indexed with `index` too (BM25's document count and average length): Keel keeps a skill catalog's "
    "BM25 index apart, so that neither search's scores depend on the other's documents (and a workspace search "
    "scores alike on every worker, whichever skills each has discovered). The results are the same, and their "
    "scores those Mastra gives when its index holds the skills alone (`skills_alone` in the fixture).",
    "directory size": "A directory's `size` in `fs/stat` is its filesystem's (4096 on ext4, another on tmpfs) on "
    "both servers: not compared.",
}


def _normal(value: Any) -> Any:
    text = json.dumps(value).replace(str(FILES_DIR), "<dir>")
    text = FS_ID.sub("<fs-id>", TIME.sub("<time>", UUID.sub("<uuid>", text)))
    return json.loads(text)


def _pending(value: Any) -> Any:
    """Mastra's `status` where Keel answers `ready` (DIFFERENCES["status"])."""
    if isinstance(value, dict):
        return {k: "pending" if k == "status" and v == "ready" else _pending(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pending(v) for v in value]
    return value


def _unscored(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("score", "scoreDetails")} for r in results]


def _same_search(keel: dict[str, Any], mastra: dict[str, Any]) -> None:
    """The same answer, scores equal to the last bits of a float (the two servers sum in another order)."""
    assert {k: v for k, v in keel.items() if k != "results"} == {k: v for k, v in mastra.items() if k != "results"}
    assert _unscored(keel["results"]) == _unscored(mastra["results"])
    for k, m in zip(keel["results"], mastra["results"], strict=True):
        assert k["score"] == pytest.approx(m["score"], rel=1e-12)
        assert k["scoreDetails"] == pytest.approx(m["scoreDetails"], rel=1e-12)


def assert_answers_as_mastra(out: dict[str, Any]) -> None:
    out = _normal(out)
    assert list(out) == list(MASTRA)
    for label, mastra in MASTRA.items():
        keel = out[label]
        if label in KEEL_STATUS:
            assert keel == {**mastra, "status": KEEL_STATUS[label]}, label
            assert mastra["status"] == 500
        elif label in ("list", "info", "info_read_only"):
            assert _pending(keel) == mastra, label
        elif label == "stat_directory":
            assert isinstance(keel["size"], int) and isinstance(mastra["size"], int)
            assert {**keel, "size": None} == {**mastra, "size": None}
        elif label.startswith("skills_search") and mastra["results"]:
            assert _unscored(keel["results"]) == _unscored(mastra["results"]), label
            _same_search(keel, RECORDED["skills_alone"][label])
        elif label.startswith("search") and mastra["results"]:
            _same_search(keel, mastra)
        else:
            assert keel == mastra, label


async def test_client_js_workspace_calls_are_answered_as_mastras_server_answers_them(api: Api) -> None:
    out = await api.js(
        "const {workspaceCalls} = await import(vars.calls); return await workspaceCalls(client);", calls=str(CALLS)
    )
    assert_answers_as_mastra(out)
    assert not (FILES_DIR / "as-mastra").exists() and not (FILES_DIR.parent / "outside.txt").exists()


def test_the_comparison_notices_an_answer_that_differs() -> None:
    """Each kind of comparison above fails for a Keel answer off by a little."""
    answers = json.loads(json.dumps(MASTRA).replace("<dir>", str(FILES_DIR)))
    answers["skills_search"] = RECORDED["skills_alone"]["skills_search"]
    answers["skills_search_names"] = RECORDED["skills_alone"]["skills_search_names"]
    answers["delete_not_empty"]["status"] = 409
    assert_answers_as_mastra(answers)
    perturbations: list[tuple[str, Any]] = [
        ("read", {"path": "as-mastra/a.txt", "content": "hello again\n", "type": "text"}),
        ("list", [{**MASTRA["list"][0], "status": "error"}, MASTRA["list"][1]]),
        ("info_read_only", {**MASTRA["info_read_only"], "filesystem": {**MASTRA["info"]["filesystem"]}}),
        ("delete_not_empty", {**MASTRA["delete_not_empty"], "status": 400}),
        ("stat_directory", {**MASTRA["stat_directory"], "type": "file"}),
        ("search", {**MASTRA["search"], "results": [{**MASTRA["search"]["results"][0], "score": 1.9}]}),
        ("skills_search", MASTRA["skills_search"]),  # Mastra's score against the other documents too
        ("read_outside", {"status": 404, "body": {"error": 'Path "../outside.txt" not found'}}),
    ]
    for label, answer in perturbations:
        with pytest.raises(AssertionError):
            assert_answers_as_mastra({**answers, label: answer})
