"""Workspace search on real engines: BM25, all-MiniLM-L6-v2 vectors (sentence-transformers, in memory) and
hybrid, over the project's own `tests/workspace/` and README.md indexed by `auto_index_paths`; the search and
index tools; the errors a misconfigured search gives.

The queries are written in rot13 here: this file is indexed too, and must not contain the words it looks for."""

from __future__ import annotations

import codecs
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers import LocalFilesystem, Workspace
from keel.workspace_providers.bm25 import split_into_chunks, tokenize
from keel.workspace_providers.embedders import SentenceTransformerEmbedder, embed_all
from keel.workspace_providers.errors import SearchError, SearchNotAvailable, WorkspaceError
from keel.workspace_providers.tools import WorkspaceCall, workspace_tools
from keel.workspace_providers.vector_stores import InMemoryVectorStore

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PATHS = ["tests/workspace/**/*.py", "tests/fixtures/search_corpus", "README.md"]
"""Not all of `tests/`: its embedding grew with every test added (537 chunks, over the 180 s timeout on a loaded
2-core machine, stop 49); these ~120 chunks are still a real project's files."""


def rot13(text: str) -> str:
    return codecs.decode(text, "rot13")


@pytest.fixture(scope="module")
async def project() -> AsyncIterator[Workspace]:
    """The project indexed once for every mode (embedding ~200 chunks takes a while on 2 cores)."""
    ws = Workspace(
        filesystem=LocalFilesystem(base_path=str(ROOT), read_only=True),
        bm25=True,
        vector_store=InMemoryVectorStore(),
        embedder=SentenceTransformerEmbedder(),
        auto_index_paths=PROJECT_PATHS,
    )
    await ws.init()
    yield ws
    await ws.destroy()


async def test_auto_index_paths_index_every_file_and_chunk_of_the_project(project: Workspace) -> None:
    engine = project.search_engine
    assert engine is not None
    for path in ("README.md", "tests/workspace/test_search.py"):
        expected = len(split_into_chunks((ROOT / path).read_text()))
        assert expected > 1 and engine.count_by_prefix(f"{path}#chunk-") == expected
    assert engine.count_by_prefix("tests/fixtures/search_corpus/notes.txt") == 1  # a short file: one document
    assert len(engine) == sum(
        len(split_into_chunks((ROOT / p).read_text()))
        for pattern in ("tests/workspace/**/*.py", "tests/fixtures/search_corpus/*", "README.md")
        for p in {str(f.relative_to(ROOT)) for f in ROOT.glob(pattern) if f.is_file()}
    )


async def test_bm25_finds_the_file_with_a_rare_phrase_first(project: Workspace) -> None:
    # The words of tests/workspace/test_read_before_write.py's docstring (and of no other file: a phrase the README
    # shares let any new file in the corpus tip the ranking)
    query = rot13("n jevgr jvgubhg n ernq, be nsgre na rkgreany punatr, snvyf")
    results = await project.search(query, mode="bm25", top_k=3)
    assert results[0].id.startswith("tests/workspace/test_read_before_write.py")
    first = results[0].to_dict()
    assert set(first) == {"id", "content", "score", "lineRange", "metadata", "scoreDetails"}
    assert first["scoreDetails"] == {"bm25": first["score"]}
    assert first["metadata"] == {"sourceFile": "tests/workspace/test_read_before_write.py"}
    # The line range names lines of the file, not of the chunk.
    lines = (ROOT / "tests/workspace/test_read_before_write.py").read_text().split("\n")
    start, end = results[0].line_range or (0, 0)
    terms = set(tokenize(query))
    assert terms & set(tokenize(lines[start - 1])) and terms & set(tokenize(lines[end - 1]))
    assert 1 <= start < end <= len(lines)


async def test_vector_and_hybrid_find_a_paraphrase_bm25_misses(project: Workspace) -> None:
    # A synonym of a word only notes.txt has; no file has the query's word itself.
    query = rot13("nvefuvc")
    assert await project.search(query, mode="bm25") == []
    target = "tests/fixtures/search_corpus/notes.txt"
    vector = await project.search(query, mode="vector", top_k=3)
    hybrid = await project.search(query, mode="hybrid", top_k=3)
    assert vector[0].id == target and hybrid[0].id == target
    assert hybrid[0].score == pytest.approx(0.5 * vector[0].score)  # no BM25 score: half the vector's
    assert hybrid[0].score_details == {"vector": vector[0].score, "bm25": None}
    # A sentence about losing access: vector search ranks the password-reset page first; BM25 does not.
    forgot = rot13("V sbetbg zl ybtva perqragvnyf naq pnaabg trg vagb zl nppbhag")
    assert (await project.search(forgot, mode="vector"))[0].id == "tests/fixtures/search_corpus/password-reset.md"
    assert (await project.search(forgot, mode="bm25"))[0].id != "tests/fixtures/search_corpus/password-reset.md"


async def test_hybrid_combines_normalised_bm25_with_the_vector_score_and_applies_min_score_after(
    project: Workspace,
) -> None:
    query = rot13("erfrg cnffjbeq")
    bm25 = await project.search(query, mode="bm25", top_k=20)
    vector = {r.id: r.score for r in await project.search(query, mode="vector", top_k=20)}
    hybrid = await project.search(query, mode="hybrid", top_k=10, vector_weight=0.3)
    low, high = min(r.score for r in bm25), max(r.score for r in bm25)
    for r in hybrid:
        b = next((x.score for x in bm25 if x.id == r.id), None)
        normalised = (b - low) / (high - low) if b is not None else 0.0
        assert r.score == pytest.approx(0.3 * vector.get(r.id, 0.0) + 0.7 * normalised)
    assert [r.score for r in hybrid] == sorted((r.score for r in hybrid), reverse=True)
    cut = hybrid[2].score
    above = await project.search(query, mode="hybrid", top_k=10, vector_weight=0.3, min_score=cut)
    assert [r.id for r in above] == [r.id for r in hybrid if r.score >= cut]


async def test_the_default_mode_is_the_most_the_workspace_can_do(project: Workspace) -> None:
    query = rot13("erfrg cnffjbeq")
    assert await project.search(query) == await project.search(query, mode="hybrid")
    assert project.can_bm25 and project.can_vector and project.can_hybrid


async def test_search_and_index_tools_answer_as_mastra(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(base_path=str(tmp_path)), bm25=True)
    await ws.init()
    tools = {t.name: t for t in await workspace_tools(ws)}
    search, index = tools["mastra_workspace_search"], tools["mastra_workspace_index"]
    assert search.parameters["properties"]["mode"] == {
        "description": "Search mode: bm25",
        "type": "string",
        "enum": ["bm25"],
    }
    call = WorkspaceCall()
    assert await index.execute({"path": "docs/a.md", "content": "alpha beta\ngamma"}, call) == "Indexed docs/a.md"
    await index.execute({"path": "docs/b.md", "content": "beta only", "metadata": {"team": "x"}}, call)
    answer = await search.execute({"query": "gamma beta"}, call)
    assert answer == "docs/a.md:1-2: alpha beta\ngamma\ndocs/b.md:1-1: beta only\n---\n2 results (bm25 search)"
    # A mode the workspace cannot do falls back to BM25, as Mastra's tool does.
    one = await search.execute({"query": "gamma", "mode": "hybrid", "topK": 1}, call)
    assert one == "docs/a.md:2-2: alpha beta\ngamma\n---\n1 result (bm25 search)"
    assert await search.execute({"query": "nothing-here"}, call) == "---\n0 results (bm25 search)"


async def test_the_index_tool_is_absent_on_a_read_only_filesystem(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(base_path=str(tmp_path), read_only=True), bm25=True)
    names = {t.name for t in await workspace_tools(ws)}
    assert "mastra_workspace_search" in names and "mastra_workspace_index" not in names
    plain = Workspace(filesystem=LocalFilesystem(base_path=str(tmp_path)))
    assert not {"mastra_workspace_search", "mastra_workspace_index"} & {t.name for t in await workspace_tools(plain)}


async def test_misconfigured_search_is_a_clear_error(tmp_path: Path) -> None:
    fs = LocalFilesystem(base_path=str(tmp_path))
    with pytest.raises(SearchError, match="vectorStore requires an embedder"):
        Workspace(filesystem=fs, vector_store=InMemoryVectorStore())
    with pytest.raises(SearchError, match='Invalid searchIndexName: "9lives"'):
        Workspace(
            filesystem=fs, bm25=True, vector_store=InMemoryVectorStore(), embedder=_letters, search_index_name="9lives"
        )
    with pytest.raises(SearchError, match="exceeds 63 characters"):
        Workspace(filesystem=fs, vector_store=InMemoryVectorStore(), embedder=_letters, search_index_name="x" * 64)
    with pytest.raises(SearchError, match="Unknown bm25 option"):
        Workspace(filesystem=fs, bm25={"k2": 1})
    bm25_only = Workspace(filesystem=fs, bm25={"k1": 1.2, "b": 0.5})
    with pytest.raises(SearchError, match="Vector search requires vector configuration"):
        await bm25_only.search("x", mode="vector")
    with pytest.raises(SearchError, match="Hybrid search requires both"):
        await bm25_only.search("x", mode="hybrid")
    vector_only = Workspace(filesystem=fs, vector_store=InMemoryVectorStore(), embedder=_letters)
    with pytest.raises(SearchError, match="BM25 search requires BM25 configuration"):
        await vector_only.search("x", mode="bm25")
    with pytest.raises(SearchNotAvailable, match="does not have search configured"):
        await Workspace(filesystem=fs).search("x")
    await vector_only.index("a", "abc")
    with pytest.raises(SearchError, match="Unknown filter operator"):
        await vector_only.search("x", filter={"$near": 1})
    await vector_only.destroy()
    with pytest.raises(WorkspaceError, match="not ready"):
        await vector_only.index("b", "late")


async def test_the_default_index_name_is_the_workspace_id_made_a_sql_identifier(tmp_path: Path) -> None:
    store = InMemoryVectorStore()
    ws = Workspace(
        id="ws-1.a", filesystem=LocalFilesystem(base_path=str(tmp_path)), vector_store=store, embedder=_letters
    )
    await ws.index("doc", "hello")
    assert await store.list_indexes() == ["ws_1_a_search"]


async def _letters(text: str) -> list[float]:
    """A tiny deterministic single-text embedder: letter counts."""
    return [float(text.lower().count(c)) + (0.01 if c == "a" else 0.0) for c in "abcdefghijklmnopqrstuvwxyz"]


class _Batch:
    batch = True

    def __init__(self, max_batch_size: Any) -> None:
        self.max_batch_size = max_batch_size
        self.calls: list[int] = []

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [await _letters(t) for t in texts]


@pytest.mark.parametrize(("declared", "groups"), [(2, [2, 2, 1]), (0, [5]), (float("nan"), [5]), (None, [5])])
async def test_a_batch_embedder_is_called_in_groups_of_its_max_batch_size(declared: Any, groups: list[int]) -> None:
    embedder = _Batch(declared)
    vectors = await embed_all(embedder, ["a", "b", "c", "d", "e"])
    assert embedder.calls == groups and len(vectors) == 5


async def test_metadata_filters_narrow_vector_results(tmp_path: Path) -> None:
    ws = Workspace(
        filesystem=LocalFilesystem(base_path=str(tmp_path)), vector_store=InMemoryVectorStore(), embedder=_Batch(2)
    )
    for i, team in enumerate(["red", "blue", "red", "green"]):
        await ws.index(f"doc{i}", f"text number {i}", metadata={"team": team, "n": i})
    found = await ws.search("text", top_k=10, filter={"team": "red"})
    assert sorted(r.id for r in found) == ["doc0", "doc2"]
    found = await ws.search("text", top_k=10, filter={"$or": [{"team": "green"}, {"n": {"$lt": 1}}]})
    assert sorted(r.id for r in found) == ["doc0", "doc3"]
    found = await ws.search("text", top_k=10, filter={"team": {"$nin": ["red", "blue"]}, "missing": {"$exists": False}})
    assert [r.id for r in found] == ["doc3"]
    assert found[0].metadata == {"team": "green", "n": 3}


async def test_the_sentence_transformer_embedder_gives_384_unit_vectors() -> None:
    vectors = await SentenceTransformerEmbedder()(["one sentence", "another"])
    assert len(vectors) == 2 and all(len(v) == 384 for v in vectors)
    assert sum(x * x for x in vectors[0]) == pytest.approx(1.0, rel=1e-4)


MASTRA = json.loads((ROOT / "tests" / "fixtures" / "mastra_search_answers.json").read_text())


@pytest.fixture(scope="module")
async def corpus_like_mastra() -> Workspace:
    """tests/fixtures/search_corpus indexed as bench/mastra/search_answers.mjs indexed it for Mastra: BM25 and
    vectors of the letter-count embedder both sides compute exactly."""
    ws = Workspace(
        filesystem=LocalFilesystem(base_path=str(ROOT / "tests" / "fixtures" / "search_corpus"), read_only=True),
        bm25=True,
        vector_store=InMemoryVectorStore(),
        embedder=_letters,
        auto_index_paths=["**/*"],
    )
    await ws.init()
    return ws


@pytest.mark.parametrize("recorded", MASTRA["answers"], ids=lambda a: a["query"])
@pytest.mark.parametrize(
    ("mode", "key", "weight"), [("vector", "vector", 0.5), ("hybrid", "hybrid", 0.5), ("hybrid", "hybrid_03", 0.3)]
)
async def test_vector_and_hybrid_answers_are_mastras(
    corpus_like_mastra: Workspace, recorded: dict[str, Any], mode: str, key: str, weight: float
) -> None:
    found = await corpus_like_mastra.search(recorded["query"], mode=mode, top_k=MASTRA["topK"], vector_weight=weight)
    expected = recorded[key]
    assert [r.id for r in found] == [e["id"] for e in expected]
    assert [r.score for r in found] == pytest.approx([e["score"] for e in expected], abs=1e-6)
    for r, e in zip(found, expected, strict=True):
        got = r.to_dict()
        assert got.get("lineRange") == e["lineRange"]
        assert set(got["scoreDetails"]) == set(e["scoreDetails"])
        assert list(got["scoreDetails"].values()) == pytest.approx(list(e["scoreDetails"].values()), abs=1e-6)


async def test_a_new_process_replaces_a_files_old_chunks_in_a_store_that_kept_them(tmp_path: Path) -> None:
    """The vector store outlives the workspace (PgVectorStore does, a shared in-memory one here): a file that
    shrank from chunks to one document leaves none of its old chunks behind after the next process indexes it."""
    store = InMemoryVectorStore()
    (tmp_path / "doc.md").write_text("\n".join(f"line {i} " + "x" * 90 for i in range(200)))
    first = Workspace(
        filesystem=LocalFilesystem(tmp_path), vector_store=store, embedder=_letters, auto_index_paths=["."]
    )
    await first.init()
    assert (await store.describe_index(f"{first.id}_search".replace("-", "_"))).count > 1
    (tmp_path / "doc.md").write_text("short now")
    again = Workspace(
        id=first.id, filesystem=LocalFilesystem(tmp_path), vector_store=store, embedder=_letters, auto_index_paths=["."]
    )
    await again.init()
    assert [r.id for r in await again.search("short", mode="vector", top_k=10)] == ["doc.md"]


async def test_a_file_deleted_before_a_restart_is_not_found_after_it(tmp_path: Path) -> None:
    (tmp_path / "kept.md").write_text("kept words")
    (tmp_path / "gone.md").write_text("gone words")
    ws = Workspace(
        filesystem=LocalFilesystem(tmp_path),
        bm25=True,
        vector_store=InMemoryVectorStore(),
        embedder=_letters,
        auto_index_paths=["."],
    )
    await ws.init()
    await ws.stop()
    (tmp_path / "gone.md").unlink()
    await ws.init()
    for mode in ("bm25", "vector", "hybrid"):
        assert [r.id for r in await ws.search("words", mode=mode, top_k=10)] == ["kept.md"], mode


async def test_an_empty_bm25_mapping_means_bm25_with_its_defaults(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), bm25={})
    assert ws.can_bm25 and not ws.can_vector


async def test_top_k_below_one_finds_nothing_and_a_non_finite_one_is_an_error(tmp_path: Path) -> None:
    ws = Workspace(
        filesystem=LocalFilesystem(tmp_path), bm25=True, vector_store=InMemoryVectorStore(), embedder=_letters
    )
    for i in range(4):
        await ws.index(f"d{i}", "same words here")
    for mode in ("bm25", "vector", "hybrid"):
        assert await ws.search("words", mode=mode, top_k=0) == []
        assert await ws.search("words", mode=mode, top_k=-1) == []
    tools = {t.name: t for t in await workspace_tools(ws)}
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            await tools["mastra_workspace_search"].execute({"query": "words", "topK": bad}, WorkspaceCall())


async def test_filters_with_keys_that_are_not_strings_are_search_errors(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), vector_store=InMemoryVectorStore(), embedder=_letters)
    await ws.index("d", "text")
    for bad in ({1: "x"}, {"a": {1: 2}}):
        with pytest.raises(SearchError):
            await ws.search("text", filter=bad)  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="Invalid searchIndexName"):
        Workspace(
            filesystem=LocalFilesystem(tmp_path),
            vector_store=InMemoryVectorStore(),
            embedder=_letters,
            search_index_name="docs\n",
        )


async def test_a_vector_store_outage_at_init_leaves_keyword_search_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a.md").write_text("alpha words")

    async def broken(text: str) -> list[float]:
        raise ConnectionError("embedding service down")

    ws = Workspace(
        filesystem=LocalFilesystem(tmp_path),
        bm25=True,
        vector_store=InMemoryVectorStore(),
        embedder=broken,
        auto_index_paths=["."],
    )
    await ws.init()
    assert ws.status == "ready"
    assert [r.id for r in await ws.search("alpha", mode="bm25")] == ["a.md"]
    assert "embedding service down" in caplog.text


async def test_a_binary_file_is_not_indexed(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02binary words\xff\xfe")
    (tmp_path / "text.md").write_text("text words")
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), bm25=True, auto_index_paths=["."])
    await ws.init()
    assert [r.id for r in await ws.search("words", top_k=10)] == ["text.md"]


async def test_reindexing_many_files_with_the_in_memory_store_stays_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Removing a file's old vectors finds them by id and by source file, not by scanning every vector."""
    from keel.workspace_providers import vector_filter

    store = InMemoryVectorStore()
    await store.create_index("linear", 2)
    metadata = [{"id": "a#chunk-0", "sourceFile": "a"}, {"id": "a#chunk-1", "sourceFile": "a"}, {"id": "b"}]
    await store.upsert("linear", [[1, 0]] * 3, metadata, ["a#chunk-0", "a#chunk-1", "b"])
    scanned: list[Any] = []
    real = vector_filter.matches

    def counting(meta: Any, f: Any) -> bool:
        scanned.append(meta)
        return real(meta, f)

    monkeypatch.setattr(vector_filter, "matches", counting)
    both = {"$or": [{"id": {"$in": ["b"]}}, {"sourceFile": {"$in": ["a"]}}]}
    assert await store.delete_vectors("linear", both) == 3
    assert await store.delete_vectors("linear", {"sourceFile": "nothing"}) == 0
    assert scanned == [] and (await store.describe_index("linear")).count == 0


@pytest.mark.parametrize("top_k", [1, 3, 10, 50, 200])
async def test_the_in_memory_store_ranks_as_a_full_sort_would(top_k: int) -> None:
    rng = random.Random(top_k)
    store = InMemoryVectorStore()
    await store.create_index("ranked", 4)
    vectors = [[rng.choice([0.0, 0.5, 1.0]) + 0.01 for _ in range(4)] for _ in range(120)]  # many equal scores
    metadata = [{"even": i % 2 == 0, "n": i} for i in range(120)]
    await store.upsert("ranked", vectors, metadata, [f"v{i}" for i in range(120)])
    query = [1.0, 0.2, 0.7, 0.1]
    everything = await store.query("ranked", query, top_k=120)
    assert [h.score for h in everything] == sorted((h.score for h in everything), reverse=True)
    assert [h.id for h in await store.query("ranked", query, top_k=top_k)] == [h.id for h in everything][:top_k]
    rare = {"n": {"$in": [3, 77, 119]}}  # fewer matches than the first candidates hold
    assert [h.id for h in await store.query("ranked", query, top_k=top_k, filter=rare)] == [
        h.id for h in everything if h.metadata["n"] in (3, 77, 119)
    ][:top_k]
