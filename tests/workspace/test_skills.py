"""Workspace skills as Mastra's: for the corpus of tests/fixtures/skills/corpus.json, the tool specs, the system
messages and every tool call's output are what the real @mastra/core 1.71 answered (recorded by
tests/fixtures/skills/record_skill_answers.mjs into mastra_skill_answers.json), and so is the verdict on each
SKILL.md of invalid_cases.json. The other tests read real files through a real `LocalFilesystem`."""

from __future__ import annotations

import base64
import datetime
import gc
import json
import logging
import os
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers import Workspace
from keel.workspace_providers.errors import WorkspaceError
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.search import BM25Config
from keel.workspace_providers.skill_catalog import SkillCatalog
from keel.workspace_providers.skill_frontmatter import (
    InvalidSkillPath,
    SkillConflict,
    SkillError,
    SkillValidationError,
    json_safe,
    parse_skill_md,
    validate_skill_content,
)
from keel.workspace_providers.skill_tools import (
    SKILL_TOOL_INPUTS,
    SKILL_TOOL_SPECS,
    SkillInput,
    SkillReadInput,
    SkillSearchInput,
    js_fixed,
    skill,
    skill_read,
    skill_search,
)
from keel.workspace_providers.skills import SKILLS_GUIDANCE, WorkspaceSkills, format_skills_catalog

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "skills"
CORPUS = json.loads((FIXTURES / "corpus.json").read_text())
RECORDED = json.loads((FIXTURES / "mastra_skill_answers.json").read_text())
CASES = json.loads((FIXTURES / "invalid_cases.json").read_text())
TOOLS: dict[str, Any] = {"skill": skill, "skill_search": skill_search, "skill_read": skill_read}
YAML_ERRORS = {"yaml", "dup", "noclose"}
"""Cases whose message is the YAML parser's own (js-yaml's words differ from PyYAML's): the prefix is compared."""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def corpus(root: Path) -> Path:
    write(root, CORPUS["files"])
    for name, data in CORPUS["binary_files"].items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(base64.b64decode(data))
    return root


def skill_md(name: str, description: str = "Does things.", body: str = "Body.", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"


def skills_in(root: Path, paths: list[str], **options: Any) -> WorkspaceSkills:
    return WorkspaceSkills(paths, source=LocalFilesystem(root), **options)


# --- Mastra's recorded answers --------------------------------------------------------------------------------


def test_the_tools_are_advertised_with_mastras_descriptions_and_schemas() -> None:
    assert RECORDED["tools"] == SKILL_TOOL_SPECS
    assert set(SKILL_TOOL_INPUTS) == set(SKILL_TOOL_SPECS)


@pytest.mark.parametrize("mode", ["plain", "bm25"])
@pytest.mark.parametrize("index", range(len(CORPUS["calls"])), ids=lambda i: f"{i}-{CORPUS['calls'][i][0]}")
async def test_every_tool_call_answers_as_mastra_did(tmp_path: Path, mode: str, index: int) -> None:
    recorded = RECORDED[mode][index]
    tool, raw = recorded["call"]
    skills = skills_in(corpus(tmp_path), CORPUS["skills"], bm25=mode == "bm25")
    args = SKILL_TOOL_INPUTS[tool].model_validate(raw)
    if recorded["output"]["type"] == "error-text":
        with pytest.raises(InvalidSkillPath) as raised:
            await TOOLS[tool](skills, args)
        assert str(raised.value) == recorded["output"]["value"]
        assert raised.value.error_name == "Error"
    else:
        assert await TOOLS[tool](skills, args) == recorded["output"]["value"]


async def test_instructions_are_mastras_available_skills_block_and_guidance(tmp_path: Path) -> None:
    skills = skills_in(corpus(tmp_path), CORPUS["skills"])
    assert skills.get_instructions() == ""  # nothing discovered before init()
    await skills.init()
    expected = "\n\n".join(RECORDED["system"])
    assert RECORDED["system"][1] == SKILLS_GUIDANCE
    assert skills.get_instructions() == expected
    assert await skills.get_instructions_async() == expected
    workspace = Workspace(filesystem=LocalFilesystem(tmp_path), extensions=[skills])
    await workspace.init()
    assert workspace.skills is skills
    assert workspace.get_instructions().endswith(expected)


async def test_no_skills_means_no_instructions(tmp_path: Path) -> None:
    skills = skills_in(tmp_path, ["skills"])
    await skills.init()
    assert skills.get_instructions() == "" and await skills.get_instructions_async() == ""
    assert await skills.list() == []


def test_the_catalog_formats_escape_and_sort_as_mastra() -> None:
    entries = [
        {"name": "b-skill", "description": "Say \"hi\" & 'bye'", "location": "s/b/SKILL.md", "source": "local"},
        {"name": "a-skill", "description": "First", "location": "s/a/SKILL.md", "source": "external"},
    ]
    assert format_skills_catalog(entries).splitlines()[2] == "    <name>a-skill</name>"
    assert "Say &quot;hi&quot; &amp; &apos;bye&apos;" in format_skills_catalog(entries)
    assert format_skills_catalog(entries, "markdown") == (
        "# Available Skills\n\n- **a-skill** [external] (s/a/SKILL.md): First\n"
        "- **b-skill** [local] (s/b/SKILL.md): Say \"hi\" & 'bye'"
    )
    assert format_skills_catalog(entries, "json").startswith('Available Skills:\n\n[\n  {\n    "name": "a-skill",')


@pytest.mark.parametrize("recorded", RECORDED["validation"], ids=lambda r: str(r["dir"])[:16])
def test_validation_says_what_mastra_says(recorded: dict[str, Any]) -> None:
    content = next(c for d, c in CASES if d == recorded["dir"])
    result = validate_skill_content(content, directory_name=recorded["dir"])
    assert result.valid == recorded["valid"]
    assert result.warnings == recorded["warnings"]
    assert result.instructions == recorded["instructions"]
    if recorded["dir"] in YAML_ERRORS:
        assert len(result.errors) == 1 and result.errors[0].startswith("Invalid frontmatter: ")
        assert recorded["errors"][0].startswith("Invalid frontmatter: ")
    else:
        assert result.errors == recorded["errors"]


def test_js_fixed_rounds_half_up_like_javascript() -> None:
    assert (js_fixed(0.125), js_fixed(1), js_fixed(2.675), js_fixed(0.8)) == ("0.13", "1.00", "2.67", "0.80")


# --- validation on load -----------------------------------------------------------------------------------------

INVALID = {
    "no-frontmatter": ("# Just markdown\n", "name: Expected string, received undefined"),
    "upper": (skill_md("Upper"), "name: Skill name must contain only lowercase letters"),
    "x" * 65: (skill_md("x" * 65), "name: Skill name must be 64 characters or less"),
    "-lead": (skill_md("-lead"), "name: Skill name must not start or end with a hyphen"),
    "a--b": (skill_md("a--b"), "name: Skill name must not contain consecutive hyphens"),
    "elsewhere": (skill_md("my-skill"), 'Skill name "my-skill" must match directory name "elsewhere"'),
    "empty-desc": (skill_md("empty-desc", "''"), "description: Skill description cannot be empty"),
    "long-desc": (skill_md("long-desc", "d" * 1025), "description: Skill description must be 1024 characters"),
    "blank-desc": (skill_md("blank-desc", "'   '"), "description: Skill description cannot be only whitespace"),
    "no-desc": ("---\nname: no-desc\n---\nbody\n", "description: Expected string, received undefined"),
    "lic": (skill_md("lic", extra="license: 2\n"), "license: Expected string, received number"),
    "inv": (skill_md("inv", extra="user-invocable: yes\n"), "user-invocable: Expected boolean, received string"),
    "meta": (skill_md("meta", extra="metadata: [1]\n"), "metadata: Expected object, received array"),
    "bad-yaml": ("---\nname: [x\n---\nbody\n", "Invalid frontmatter: "),
    "js": ("---js\n{name: 'js'}\n---\nbody\n", "Invalid frontmatter: JavaScript frontmatter is not supported"),
}


async def test_each_invalid_skill_md_is_skipped_naming_its_file_and_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, {f"skills/{d}/SKILL.md": content for d, (content, _) in INVALID.items()})
    write(tmp_path, {"skills/fine/SKILL.md": skill_md("fine")})
    skills = skills_in(tmp_path, ["skills"])
    with caplog.at_level(logging.ERROR, "keel.workspace_providers.skills"):
        assert [s.name for s in await skills.list()] == ["fine"]
    errors = await skills.load_errors()
    assert len(errors) == len(INVALID)
    for directory, (_, problem) in INVALID.items():
        error = next(e for e in errors if e.path == f"skills/{directory}/SKILL.md")
        assert error.message.startswith(f"Invalid skill metadata in skills/{directory}/SKILL.md:\n")
        assert problem in error.message
    assert "[WorkspaceSkills] Failed to load skill from skills/upper/SKILL.md" in caplog.text


def test_parse_skill_md_raises_with_the_file_and_every_failing_field() -> None:
    with pytest.raises(SkillValidationError) as raised:
        parse_skill_md("---\nname: Bad--\nlicense: [1]\n---\n", path="s/bad/SKILL.md", directory_name="bad")
    assert str(raised.value).startswith("Invalid skill metadata in s/bad/SKILL.md:\n")
    assert raised.value.errors == [
        "name: Skill name must contain only lowercase letters, numbers, and hyphens",
        "name: Skill name must not start or end with a hyphen",
        "name: Skill name must not contain consecutive hyphens",
        "description: Expected string, received undefined",
        "license: Expected string, received object",
        'Skill name "Bad--" must match directory name "bad"',
    ]
    assert isinstance(raised.value, WorkspaceError) and raised.value.path == "s/bad/SKILL.md"


def test_allowed_tools_and_other_keys_are_ignored_as_mastra_ignores_them() -> None:
    parsed, warnings = parse_skill_md(
        skill_md("ok", extra="allowed-tools: Bash Read\ncompatibility: {python: '>=3.11'}\nuser-invocable: false\n"),
        path="s/ok/SKILL.md",
        directory_name="ok",
    )
    assert "allowed-tools" not in parsed.metadata and warnings == []
    assert parsed.metadata["compatibility"] == {"python": ">=3.11"} and parsed.metadata["user-invocable"] is False


# --- precedence, conflicts, paths ---------------------------------------------------------------------------------


async def test_same_name_skills_resolve_local_then_managed_then_external(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "node_modules/pkg/skills/dup/SKILL.md": skill_md("dup", body="external"),
            ".mastra/skills/dup/SKILL.md": skill_md("dup", body="managed"),
            "skills/dup/SKILL.md": skill_md("dup", body="local"),
        },
    )
    everything = skills_in(tmp_path, ["node_modules/pkg/skills", ".mastra/skills", "skills"])
    found = await everything.get("dup")
    assert found is not None and (found.instructions, found.source.type, found.path) == ("local", "local", "skills/dup")
    assert [(s.path, s.name) for s in await everything.list()] == [
        ("node_modules/pkg/skills/dup", "dup"),
        (".mastra/skills/dup", "dup"),
        ("skills/dup", "dup"),
    ]
    without_local = skills_in(tmp_path, ["node_modules/pkg/skills", ".mastra/skills"])
    managed = await without_local.get("dup")
    assert managed is not None and managed.source.to_dict() == {"type": "managed", "mastraPath": ".mastra/skills"}
    external = await without_local.get("node_modules/pkg/skills/dup/SKILL.md")
    assert external is not None and external.source.to_dict() == {
        "type": "external",
        "packagePath": "node_modules/pkg/skills",
    }


async def test_two_skills_of_one_name_and_source_type_are_an_error_unless_asked_by_path(tmp_path: Path) -> None:
    write(tmp_path, {"a/skills/x/SKILL.md": skill_md("x", body="A"), "b/skills/x/SKILL.md": skill_md("x", body="B")})
    skills = skills_in(tmp_path, ["a/skills", "b/skills"])
    with pytest.raises(SkillConflict) as raised:
        await skills.get("x")
    assert str(raised.value) == (
        '[WorkspaceSkills] Cannot resolve skill "x": multiple local skills found at "a/skills/x", "b/skills/x". '
        "Rename one or move it to a different source type."
    )
    with pytest.raises(SkillConflict):
        await skill(skills, SkillInput(name="x"))
    assert len(await skills.list()) == 2
    assert await skill(skills, SkillInput(name="b/skills/x")) == "B"
    assert await skill(skills, SkillInput(name="a/skills/x/SKILL.md")) == "A"
    assert await skills.has("a/skills/x") and not await skills.has("c/skills/x")


async def test_a_skill_directory_a_skill_file_and_globs_are_all_skills_paths(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "one/SKILL.md": skill_md("one"),
            "two/SKILL.md": skill_md("two"),
            "apps/web/skills/three/SKILL.md": skill_md("three"),
            "apps/api/skills/four/SKILL.md": skill_md("four"),
            "node_modules/lib/skills/five/SKILL.md": skill_md("five"),
        },
    )
    skills = skills_in(tmp_path, ["one", "two/SKILL.md", "./**/skills"])
    listed = {s.name: s.path for s in await skills.list()}
    assert listed == {
        "one": "one",
        "two": "two",
        "four": "apps/api/skills/four",
        "three": "apps/web/skills/three",
        "five": "node_modules/lib/skills/five",
    }
    five = await skills.get("five")
    assert five is not None and five.source.type == "local"  # decided from the configured path, "./**/skills"


async def test_a_symlinked_alias_of_a_skill_is_listed_once(tmp_path: Path) -> None:
    write(tmp_path, {"skills/solo/SKILL.md": skill_md("solo")})
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "solo").symlink_to(tmp_path / "skills" / "solo")
    skills = skills_in(tmp_path, ["skills", "more"])
    assert [s.path for s in await skills.list()] == ["more/solo"]  # same source type: the first path by name
    found = await skills.get("solo")
    assert found is not None and found.path == "more/solo"  # no conflict: both paths are one skill


# --- request-scoped discovery ----------------------------------------------------------------------------------


async def test_a_resolver_chooses_the_skills_paths_per_request(tmp_path: Path) -> None:
    write(tmp_path, {"basic/hello/SKILL.md": skill_md("hello"), "premium/gold/SKILL.md": skill_md("gold", body="$$")})

    async def by_tier(context: dict[str, Any]) -> list[str]:
        return ["basic", "premium"] if context.get("tier") == "premium" else ["basic"]

    for resolver in (by_tier, lambda c: ["basic", "premium"] if c.get("tier") == "premium" else ["basic"]):
        skills = WorkspaceSkills(resolver, source=LocalFilesystem(tmp_path))
        await skills.init()
        assert skills.get_instructions() == ""  # needs the request: get_instructions_async
        premium = await skills.get_instructions_async({"tier": "premium"})
        assert "<name>gold</name>" in premium and "<name>hello</name>" in premium
        assert "<name>gold</name>" not in await skills.get_instructions_async({"tier": "free"})
        assert await skill(skills, SkillInput(name="gold"), {"tier": "premium"}) == "$$"
        assert (await skill(skills, SkillInput(name="gold"), {"tier": "free"})).startswith('Skill "gold" not found.')
        assert [s.name for s in await skills.list()] == ["hello"]  # no request: the resolver gets {}


async def test_a_source_resolver_reads_each_tenants_filesystem(tmp_path: Path) -> None:
    for tenant in ("a", "b"):
        write(tmp_path / tenant, {f"skills/only-{tenant}/SKILL.md": skill_md(f"only-{tenant}")})
    filesystems = {t: LocalFilesystem(tmp_path / t) for t in ("a", "b")}
    skills = WorkspaceSkills(["skills"], source=lambda c: filesystems[c.get("tenant", "a")])
    assert "<name>only-b</name>" in await skills.get_instructions_async({"tenant": "b"})
    assert await skill(skills, SkillInput(name="only-a"), {"tenant": "a"}) == "Body."
    assert (await skill(skills, SkillInput(name="only-a"), {"tenant": "b"})).startswith('Skill "only-a" not found')
    assert (await skills.scoped({"tenant": "b"})) is (await skills.scoped({"tenant": "b"}))


async def test_catalogs_of_every_resolved_path_set_are_bounded_by_max_cached_sources(tmp_path: Path) -> None:
    write(tmp_path, {f"skills/u{i}/s/SKILL.md": skill_md("s") for i in range(3)})
    skills = WorkspaceSkills(
        lambda c: [f"skills/u{c['user']}"], source=LocalFilesystem(tmp_path, read_only=True), max_cached_sources=4
    )
    catalogs = [weakref.ref(await skills.scoped({"user": u})) for u in range(200)]
    gc.collect()
    assert sum(ref() is not None for ref in catalogs) == 4  # not one per user, each with its own index
    assert catalogs[-1]() is await skills.scoped({"user": 199})  # the most recent are reused
    assert catalogs[0]() is None


async def test_maybe_refresh_finds_a_skill_added_after_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, {"skills/first/SKILL.md": skill_md("first")})
    skills = skills_in(tmp_path, ["skills"])
    await skills.init()
    write(tmp_path, {"skills/second/SKILL.md": skill_md("second")})
    os.utime(tmp_path / "skills", (4_000_000_000, 4_000_000_000))
    await skills.maybe_refresh()
    assert [s.name for s in await skills.list()] == ["first"]  # within the cooldown: no look at the disk
    monkeypatch.setattr(SkillCatalog, "STALENESS_CHECK_COOLDOWN", 0.0)
    await skills.maybe_refresh()
    assert [s.name for s in await skills.list()] == ["first", "second"]


# --- search -------------------------------------------------------------------------------------------------------


async def test_bm25_search_ranks_the_most_relevant_file_first(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "skills/deploy/SKILL.md": skill_md("deploy", body="Deploy with kubectl apply.\nRoll back with kubectl."),
            "skills/deploy/references/helm.md": "Helm charts: helm upgrade --install.\n",
            "skills/cooking/SKILL.md": skill_md("cooking", body="Boil pasta for ten minutes."),
        },
    )
    skills = skills_in(tmp_path, ["skills"], bm25=True)
    results = await skills.search("kubectl rollback helm")
    assert [(r.skill_name, r.source) for r in results] == [
        ("deploy", "references/helm.md"),
        ("deploy", "SKILL.md"),
    ]
    assert results[0].score > results[1].score and results[1].line_range == (1, 2)
    assert await skills.search("kubectl", skill_names=["cooking"]) == []
    only_skill_md = await skills.search("helm kubectl", include_references=False)
    assert [r.source for r in only_skill_md] == ["SKILL.md"]
    text = await skill_search(skills, SkillSearchInput(query="pasta", topK=1))
    assert text.startswith("[cooking] (lines 1-1) (score: ") and text.endswith("\nBoil pasta for ten minutes.")


@pytest.mark.parametrize(
    "bm25",
    [True, {}, {"k1": 1.5}, {"bm25": {}}, BM25Config()],
    ids=["true", "empty-mapping", "flat", "nested", "parsed"],
)
async def test_every_form_of_bm25_on_is_a_bm25_search(tmp_path: Path, bm25: Any) -> None:
    write(tmp_path, {"skills/deploy/SKILL.md": skill_md("deploy", body="Intro.\nDeploy with kubectl apply.")})
    [result] = await skills_in(tmp_path, ["skills"], bm25=bm25).search("kubectl")
    assert result.score != 1 and result.line_range == (2, 2) and result.score_details is not None


async def test_bm25_parameters_and_tokenize_options_reach_the_index_in_every_form(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "skills/deploy/SKILL.md": skill_md("deploy", body="kubectl apply and kubectl rollout " * 3),
            "skills/other/SKILL.md": skill_md("other", body="kubectl once, among many other words here"),
        },
    )

    async def scores(bm25: Any, query: str = "kubectl") -> list[float]:
        return [r.score for r in await skills_in(tmp_path, ["skills"], bm25=bm25).search(query)]

    tuned = await scores({"k1": 0.5, "b": 0.1})
    assert tuned != await scores(True)
    assert await scores({"bm25": {"k1": 0.5, "b": 0.1}}) == tuned
    assert await scores(BM25Config(k1=0.5, b=0.1)) == tuned
    assert await scores({"bm25": {}, "tokenize": {"stopwords": ["kubectl"]}}) == []
    for off in (False, None):
        assert await scores(off) == [1, 1]  # substring search
    with pytest.raises(WorkspaceError, match="Unknown bm25 option"):
        skills_in(tmp_path, ["skills"], bm25={"k": 1})


async def test_substring_search_is_mastras_fallback_without_an_index(tmp_path: Path) -> None:
    long_body = "Intro. " + "word " * 60 + "needle at the end."
    write(tmp_path, {"skills/long/SKILL.md": skill_md("long", body=long_body)})
    skills = skills_in(tmp_path, ["skills"])
    [result] = await skills.search("NEEDLE")
    assert (result.score, result.content) == (1, long_body[:200])
    assert await skill_search(skills, SkillSearchInput(query="needle")) == f"[long] (score: 1.00)\n{long_body[:200]}"


# --- skill_read containment -------------------------------------------------------------------------------------


async def test_skill_read_refuses_paths_that_leave_the_skill(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(
        root,
        {"skills/a/SKILL.md": skill_md("a"), "skills/a/references/ok.md": "fine\n", "skills/b/SKILL.md": skill_md("b")},
    )
    (tmp_path / "secret.txt").write_text("outside the workspace\n")
    (root / "skills" / "a" / "references" / "out.md").symlink_to(tmp_path / "secret.txt")
    (root / "skills" / "a" / "references" / "sibling.md").symlink_to(root / "skills" / "b" / "SKILL.md")
    skills = skills_in(root, ["skills"])
    assert await skill_read(skills, SkillReadInput(skillName="a", path="references/ok.md")) == "fine\n"
    for path, message in [
        ("../b/SKILL.md", "Invalid asset path: ../b/SKILL.md"),
        ("references/../../b/SKILL.md", "Invalid asset path: references/../../b/SKILL.md"),
        (str(tmp_path / "secret.txt"), f"Invalid asset path: {tmp_path / 'secret.txt'}"),
        ("references/out.md", "Invalid asset path: references/out.md (it leads outside the skill directory)"),
        ("references/sibling.md", "Invalid asset path: references/sibling.md (it leads outside the skill directory)"),
    ]:
        with pytest.raises(InvalidSkillPath) as raised:
            await skill_read(skills, SkillReadInput(skillName="a", path=path))
        assert str(raised.value) == message
    with pytest.raises(InvalidSkillPath, match="Invalid reference path"):
        await skills.get_reference("a", "../b/SKILL.md")
    assert await skills.get_script("a", "scripts/none.sh") is None
    assert await skills.list_references("a") == ["ok.md", "out.md", "sibling.md"]


async def test_skill_read_refuses_a_nul_byte_as_an_invalid_path(tmp_path: Path) -> None:
    write(tmp_path, {"skills/a/SKILL.md": skill_md("a"), "skills/a/references/ok.md": "fine\n"})
    skills = skills_in(tmp_path, ["skills"])
    for path in ("references/a\0b", "\0"):
        with pytest.raises(InvalidSkillPath) as raised:
            await skill_read(skills, SkillReadInput(skillName="a", path=path))
        assert str(raised.value) == f"Invalid asset path: {path}"


def _alias_fan_out(levels: int) -> str:
    """YAML whose last anchor stands for 9**levels strings ("billion laughs")."""
    lines = ["  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "metadata:\n" + "\n".join(lines) + "\n"


async def test_a_yaml_alias_fan_out_is_refused_at_discovery_not_expanded(tmp_path: Path) -> None:
    write(tmp_path, {"skills/bomb/SKILL.md": skill_md("bomb", extra=_alias_fan_out(9))})
    for validate in (True, False):
        skills = skills_in(tmp_path, ["skills"], validate_on_load=validate)
        assert await skills.list() == []
        [error] = await skills.load_errors()
        assert error.path == "skills/bomb/SKILL.md"
        assert "Invalid frontmatter: YAML aliases expand the frontmatter to more than 100000 values" in error.message


def test_json_safe_converts_shared_values_once_and_refuses_huge_or_recursive_ones() -> None:
    small: Any = ["x", datetime.date(2026, 1, 2)]
    for _ in range(2):
        small = [small] * 3
    assert json_safe({"v": small}) == {"v": [[["x", "2026-01-02T00:00:00.000Z"]] * 3] * 3}
    huge: Any = ["x"] * 9
    for _ in range(6):
        huge = [huge] * 9  # 9**7 strings, from 7 distinct lists
    started = time.monotonic()
    with pytest.raises(SkillError, match="more than 100000 values"):
        json_safe(huge)
    assert time.monotonic() - started < 1
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SkillError, match="refers to itself"):
        json_safe({"loop": loop})


async def test_adding_and_removing_one_skill_updates_the_catalog_and_the_index(tmp_path: Path) -> None:
    write(tmp_path, {"skills/first/SKILL.md": skill_md("first", body="alpha")})
    skills = skills_in(tmp_path, ["skills"], bm25=True)
    await skills.init()
    write(tmp_path, {"skills/second/SKILL.md": skill_md("second", body="beta")})
    await skills.add_skill("skills/second")
    assert [r.skill_name for r in await skills.search("beta")] == ["second"]
    await skills.remove_skill("first")
    assert [s.name for s in await skills.list()] == ["second"] and await skills.search("alpha") == []
    write(tmp_path, {"skills/bad/SKILL.md": skill_md("Bad")})
    with pytest.raises(SkillValidationError, match=r"Invalid skill metadata in skills/bad/SKILL\.md"):
        await skills.add_skill("skills/bad/SKILL.md")
