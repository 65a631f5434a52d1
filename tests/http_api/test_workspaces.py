"""Workspaces over HTTP with the real `@mastra/client-js`: listed and described, their files written, read, listed
and deleted, their content indexed and searched, their skills read, each operation a standalone `keel.execute_tool`
activity on the worker (the one a run's workspace tools run in), as the Temporal UI lists it."""

from __future__ import annotations

import asyncio

from keel.workspace_providers.tools import tracker_path
from tests.http_api.conftest import Api
from tests.http_api.workspace_app import FILES_DIR, SKILL_MD, STYLE_MD, files_workspace

CAPABLE = {
    "hasFilesystem": True,
    "hasSandbox": False,
    "canBM25": True,
    "canVector": False,
    "canHybrid": False,
    "hasSkills": True,
}

# `failure(fn)`: the status and body of the MastraClientError the call throws (the client retries a 5xx first).
FAILURE = """
async function failure(call) {
  try { await call(); return null; } catch (e) { return {status: e.status, body: e.body}; }
}
const ws = client.getWorkspace("api-files");
"""


async def test_workspaces_are_listed_and_described_as_mastra_does(api: Api) -> None:
    out = await api.js("""
        const {workspaces} = await client.listWorkspaces();
        const info = await client.getWorkspace("api-files").info();
        const missing = await client.getWorkspace("nope").info();
        return {workspaces, info, missing};
    """)
    listed = {w["id"]: w for w in out["workspaces"]}
    assert listed["api-files"] == {
        "id": "api-files",
        "name": "API files",
        "status": "ready",
        "source": "agent",
        "agentId": "files",
        "agentName": "Files",
        "capabilities": CAPABLE,
        "safety": {"readOnly": False},
    }
    assert listed["api-files-read-only"]["safety"] == {"readOnly": True}
    assert listed["controller-ws"]["agentId"] == "assistant"  # a controller's workspace is its agent's
    info = out["info"]
    assert {k: info[k] for k in ("isWorkspaceConfigured", "id", "name", "status", "capabilities", "safety")} == {
        "isWorkspaceConfigured": True,
        "id": "api-files",
        "name": "API files",
        "status": "ready",
        "capabilities": CAPABLE,
        "safety": {"readOnly": False},
    }
    assert info["filesystem"]["provider"] == "local" and info["filesystem"]["name"] == "LocalFilesystem"
    assert info["filesystem"]["metadata"]["basePath"] == str(FILES_DIR)
    assert out["missing"] == {"isWorkspaceConfigured": False}


async def test_files_are_written_read_listed_and_deleted_through_standalone_tool_activities(
    api: Api, task_queue: str
) -> None:
    out = await api.js(
        FAILURE
        + """
        const wrote = await ws.writeFile("notes/a.txt", "hello\\n");
        const read = await ws.readFile("notes/a.txt");
        const stat = await ws.stat("notes/a.txt");
        const made = await ws.mkdir("notes/sub/deeper");
        await ws.writeFile("notes/sub/deeper/b.bin", Buffer.from([0, 1, 255]).toString("base64"), {encoding: "base64"});
        const raw = await ws.readFile("notes/sub/deeper/b.bin", "base64");
        const flat = await ws.listFiles("notes");
        const deep = await ws.listFiles("notes", true);
        const notEmpty = await failure(() => ws.delete("notes/sub"));
        const deleted = await ws.delete("notes", {recursive: true});
        const gone = await failure(() => ws.stat("notes/a.txt"));
        const forced = await ws.delete("notes", {force: true});
        return {wrote, read, stat, made, raw, flat, deep, notEmpty, deleted, gone, forced};
    """
    )
    assert out["wrote"] == {"success": True, "path": "notes/a.txt"}
    assert out["read"] == {"path": "notes/a.txt", "content": "hello\n", "type": "file"}
    stat = out["stat"]
    assert {k: stat[k] for k in ("path", "type", "size", "mimeType")} == {
        "path": "notes/a.txt",
        "type": "file",
        "size": 6,
        "mimeType": "text/plain",
    }
    assert stat["modifiedAt"].endswith("Z") and stat["createdAt"].endswith("Z")
    assert out["made"] == {"success": True, "path": "notes/sub/deeper"}
    assert out["raw"]["content"] == "AAH/"
    assert out["flat"] == {
        "path": "notes",
        "entries": [{"name": "a.txt", "type": "file", "size": 6}, {"name": "sub", "type": "directory"}],
    }
    assert {e["name"] for e in out["deep"]["entries"]} == {"a.txt", "sub", "sub/deeper", "sub/deeper/b.bin"}
    assert out["notEmpty"] == {"status": 409, "body": {"error": "Directory not empty: notes/sub"}}
    assert out["deleted"] == {"success": True, "path": "notes"}
    assert out["gone"] == {"status": 404, "body": {"error": 'Path "notes/a.txt" not found'}}
    assert out["forced"] == {"success": True, "path": "notes"}
    assert not (FILES_DIR / "notes").exists()

    # Each operation ran on the worker as a standalone activity: the one `keel tool` and a run's tools run in.
    activities = [a async for a in api.keel.temporal.list_activities(f"TaskQueue = '{task_queue}'")]
    assert {a.activity_type for a in activities} == {"keel.execute_tool"}
    writes = [a.activity_id for a in activities if "keel_workspace_fs_write" in a.activity_id]
    assert len(writes) == 2 and all(w.startswith("keel-tool-workspace-api-files-") for w in writes)


async def test_a_write_from_the_client_waits_for_the_write_lock_an_agents_write_holds(
    api: Api, task_queue: str
) -> None:
    # The worker runs in this process: holding the workspace's lock here is an agent's write tool holding it.
    async with files_workspace.write_lock.hold(tracker_path("./race.txt")):
        writing = asyncio.create_task(
            api.js('return await client.getWorkspace("api-files").writeFile("race.txt", "ui");')
        )
        query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
        for _ in range(100):  # until the write's activity runs (and waits on the lock)
            if [a async for a in api.keel.temporal.list_activities(query)]:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the write's activity never started")
        await asyncio.sleep(0.3)
        assert not writing.done() and not (FILES_DIR / "race.txt").exists()
    assert await writing == {"success": True, "path": "race.txt"}
    assert (FILES_DIR / "race.txt").read_text() == "ui"


async def test_a_path_outside_the_workspace_or_a_read_only_workspace_is_refused(api: Api) -> None:
    out = await api.js(
        FAILURE
        + """
        return {
            readOutside: await failure(() => ws.readFile("../outside.txt")),
            writeOutside: await failure(() => ws.writeFile("../outside.txt", "x")),
            absolute: await failure(() => ws.stat("/etc/passwd")),
            missing: await failure(() => ws.readFile("nope.txt")),
            noPath: await failure(() => ws.readFile("")),
            readOnly: await failure(() => client.getWorkspace("api-files-read-only").writeFile("x.txt", "x")),
            noFilesystem: await failure(() => client.getWorkspace("nope").readFile("x.txt")),
        };
    """
    )
    assert out["readOutside"]["status"] == 403 and out["readOutside"]["body"]["error"].startswith("Permission denied")
    assert out["writeOutside"]["status"] == 403
    assert out["absolute"]["status"] == 403
    assert out["missing"] == {"status": 404, "body": {"error": 'Path "nope.txt" not found'}}
    assert out["noPath"] == {"status": 400, "body": {"error": "Path is required"}}
    assert out["readOnly"] == {"status": 403, "body": {"error": "Workspace is in read-only mode"}}
    assert out["noFilesystem"] == {"status": 404, "body": {"error": "No workspace filesystem configured"}}
    assert not (FILES_DIR.parent / "outside.txt").exists()


async def test_indexed_content_is_found_by_search(api: Api) -> None:
    out = await api.js(
        FAILURE
        + """
        const indexed = await ws.index({path: "docs/temporal.md", content: "Temporal replays workflow histories."});
        await ws.index({path: "docs/other.md", content: "Nothing to see here."});
        const found = await ws.search({query: "replays histories", topK: 3});
        const noSearch = await client.getWorkspace("api-files-read-only").search({query: "replays"});
        const readOnly = client.getWorkspace("api-files-read-only");
        const cannotIndex = await failure(() => readOnly.index({path: "a", content: "b"}));
        return {indexed, found, noSearch, cannotIndex};
    """
    )
    assert out["indexed"] == {"success": True, "path": "docs/temporal.md"}
    found = out["found"]
    assert found["query"] == "replays histories" and found["mode"] == "bm25"
    assert [r["id"] for r in found["results"]] == ["docs/temporal.md"]
    top = found["results"][0]
    assert top["content"] == "Temporal replays workflow histories." and top["score"] > 0
    assert top["lineRange"] == {"start": 1, "end": 1} and set(top["scoreDetails"]) == {"bm25"}
    assert out["noSearch"] == {"results": [], "query": "replays", "mode": "bm25"}
    assert out["cannotIndex"] == {"status": 400, "body": {"error": "Workspace does not have search configured"}}


async def test_skills_are_listed_read_and_searched(api: Api) -> None:
    out = await api.js(
        FAILURE
        + """
        const skill = ws.getSkill("release-notes");
        return {
            listed: await ws.listSkills(),
            details: await skill.details(),
            references: await skill.listReferences(),
            reference: await skill.getReference("style.md"),
            found: await ws.searchSkills({query: "past tense"}),
            missing: await failure(() => ws.getSkill("nope").details()),
            missingReference: await failure(() => skill.getReference("nope.md")),
            escape: await failure(() => skill.getReference("../SKILL.md")),
            none: await client.getWorkspace("api-files-read-only").listSkills(),
        };
    """
    )
    description = "How to write the release notes of a Keel release. Use it when asked for release notes."
    meta = {
        "name": "release-notes",
        "path": "skills/release-notes",
        "description": description,
        "license": "Apache-2.0",
    }
    assert out["listed"] == {"skills": [meta], "isSkillsConfigured": True}
    assert out["details"] == {
        **meta,
        "instructions": SKILL_MD.split("---\n", 2)[2].strip(),
        "source": {"type": "local", "projectPath": "skills"},
        "references": ["style.md"],
        "scripts": [],
        "assets": [],
    }
    assert out["references"] == {"skillName": "release-notes", "references": ["style.md"]}
    assert out["reference"] == {"skillName": "release-notes", "referencePath": "style.md", "content": STYLE_MD}
    found = out["found"]
    assert found["query"] == "past tense"
    assert [(r["skillName"], r["skillPath"], r["source"]) for r in found["results"]] == [
        ("release-notes", "skills/release-notes", "references/style.md")
    ]
    assert out["missing"] == {"status": 404, "body": {"error": 'Skill "nope" not found'}}
    assert out["missingReference"] == {
        "status": 404,
        "body": {"error": 'Reference "nope.md" not found in skill "release-notes"'},
    }
    assert out["escape"] == {
        "status": 400,
        "body": {"error": 'Invalid file path "../SKILL.md". Path traversal is not allowed.'},
    }
    assert out["none"] == {"skills": [], "isSkillsConfigured": False}
