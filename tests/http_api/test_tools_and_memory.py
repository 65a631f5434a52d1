"""Tools and memory over HTTP with the real `@mastra/client-js`: the app's tools listed and executed on a
worker (bad input answered as Mastra does), threads created, listed, cloned and deleted, messages saved and
listed, on the storage layer."""

from __future__ import annotations

from tests.http_api.conftest import Api


async def test_tools_are_listed_and_executed(api: Api) -> None:
    out = await api.js("""
        const tools = await client.listTools();
        const double = await client.getTool("double").details();
        const result = await client.getTool("double").execute({data: {n: 21}});
        const invalid = await client.getTool("double").execute({data: {n: "x"}});
        let missing;
        try { await client.getTool("nope").details(); } catch (e) { missing = e.status; }
        return {ids: Object.keys(tools), double, result, invalid, missing};
    """)
    assert {"double", "ask-human", "pay"} <= set(out["ids"])
    assert out["double"]["id"] == "double" and out["result"] == {"n": 42}
    assert out["invalid"]["error"] is True and "n" in out["invalid"]["validationErrors"]["fields"]
    assert out["missing"] == 404


async def test_threads_and_messages(api: Api) -> None:
    out = await api.js("""
        const created = await client.createMemoryThread({agentId: "writer", resourceId: "ann", title: "First",
            metadata: {k: "v"}, threadId: "t-1"});
        await client.saveMessageToMemory({agentId: "writer", messages: [
            {id: "m1", role: "user", threadId: "t-1", resourceId: "ann", createdAt: new Date(Date.UTC(2026, 0, 1)),
             content: {format: 2, parts: [{type: "text", text: "hello"}]}},
            {id: "m2", role: "assistant", threadId: "t-1", resourceId: "ann", createdAt: new Date(Date.UTC(2026, 0, 2)),
             content: {format: 2, parts: [{type: "text", text: "hi"}]}},
        ]});
        const thread = client.getMemoryThread({threadId: "t-1", agentId: "writer"});
        const got = await thread.get();
        const messages = await thread.listMessages();
        const clone = await thread.clone({newThreadId: "t-2", title: "Copy", options: {messageLimit: 1}});
        const listed = await client.listMemoryThreads({resourceId: "ann", agentId: "writer"});
        const deleted = await thread.delete({agentId: "writer"});
        let gone;
        try { await thread.get(); } catch (e) { gone = e.status; }
        return {created, got, messages, clone, listed, deleted, gone};
    """)
    assert out["created"]["id"] == "t-1" and out["created"]["metadata"] == {"k": "v"}
    assert out["got"]["title"] == "First"
    texts = [m["content"]["parts"][0]["text"] for m in out["messages"]["messages"]]
    assert texts == ["hello", "hi"] and out["messages"]["total"] == 2
    clone = out["clone"]
    assert clone["thread"]["id"] == "t-2" and clone["thread"]["metadata"]["clone"]["sourceThreadId"] == "t-1"
    assert [m["content"]["parts"][0]["text"] for m in clone["clonedMessages"]] == ["hi"]
    assert {t["id"] for t in out["listed"]["threads"]} == {"t-1", "t-2"}
    assert out["deleted"] == {"result": "Thread deleted"} and out["gone"] == 404
