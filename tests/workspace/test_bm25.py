"""BM25 as Mastra's Workspace does it: for a fixed corpus and queries, the ids, scores and line ranges the real
`@mastra/core` 1.71 Workspace answered (recorded by bench/mastra/search_answers.mjs into
tests/fixtures/mastra_search_answers.json) are Keel's answers too."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers.bm25 import BM25Index, find_line_range, split_into_chunks, tokenize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CORPUS = FIXTURES / "search_corpus"
RECORDED = json.loads((FIXTURES / "mastra_search_answers.json").read_text())


def index_like_mastra() -> tuple[BM25Index, dict[str, int]]:
    """Each file as one document, or, past 4,000 characters, as chunks `<path>#chunk-<i>` (Mastra's ids)."""
    index, first_lines = BM25Index(), {}
    for path in sorted(CORPUS.iterdir()):
        content = path.read_text()
        chunks = split_into_chunks(content)
        if len(chunks) == 1:
            index.add(path.name, content)
            continue
        for i, chunk in enumerate(chunks):
            doc_id = f"{path.name}#chunk-{i}"
            index.add(doc_id, chunk.content, {"sourceFile": path.name})
            first_lines[doc_id] = chunk.start_line
    return index, first_lines


@pytest.mark.parametrize("recorded", RECORDED["answers"], ids=lambda a: a["query"])
def test_ids_scores_and_line_ranges_are_mastras(recorded: dict[str, Any]) -> None:
    index, first_lines = index_like_mastra()
    terms = tokenize(recorded["query"])
    answered = []
    for hit in index.search(recorded["query"], top_k=RECORDED["topK"]):
        found = find_line_range(hit.content, terms)
        shift = first_lines.get(hit.id, 1) - 1
        line_range = {"start": found[0] + shift, "end": found[1] + shift} if found else None
        answered.append({"id": hit.id, "score": hit.score, "lineRange": line_range})
    expected = recorded["bm25"]
    assert [a["id"] for a in answered] == [e["id"] for e in expected]
    assert [a["score"] for a in answered] == pytest.approx([e["score"] for e in expected], rel=1e-12)
    assert [a["lineRange"] for a in answered] == [e["lineRange"] for e in expected]


def test_a_re_added_document_replaces_the_old_one_and_a_removed_one_is_gone() -> None:
    index, _ = index_like_mastra()
    before = index.search("budget spreadsheet")
    index.add("notes.txt", "nothing about money")
    assert [h.id for h in index.search("budget spreadsheet")] == []
    index.add("notes.txt", (CORPUS / "notes.txt").read_text())
    assert index.search("budget spreadsheet") == before
    assert index.remove("notes.txt") and "notes.txt" not in index and not index.remove("notes.txt")


def test_the_corpus_makes_chunks_with_overlap() -> None:
    chunks = split_into_chunks((CORPUS / "handbook.md").read_text())
    assert len(chunks) > 1 and all(len(c.content) <= 4000 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert before.content.split("\n")[-3:] == after.content.split("\n")[:3]  # 3 lines shared
