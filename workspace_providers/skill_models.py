"""The data of skills (Mastra's `Skill`, `SkillMetadata`, `ContentSource`, `SkillSearchResult`) and the path rules
skills follow: workspace paths joined with ``/`` and not normalised, as Mastra keeps them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from keel.workspace_providers.skill_frontmatter import InvalidSkillPath, json_safe

SourceType = Literal["local", "managed", "external"]
SOURCE_PRIORITY: dict[str, int] = {"local": 0, "managed": 1, "external": 2}
_SOURCE_KEY = {"external": "packagePath", "local": "projectPath", "managed": "mastraPath"}


@dataclass(frozen=True)
class ContentSource:
    """Where a skill comes from: `external` (a path with a ``node_modules`` segment), `managed` (under
    ``.mastra/skills``) or `local` (anything else), decided from the configured skills path."""

    type: SourceType
    path: str

    def to_dict(self) -> dict[str, str]:
        return {"type": self.type, _SOURCE_KEY[self.type]: self.path}


def source_for_path(skills_path: str) -> ContentSource:
    """Mastra's `determineSource`."""
    if "node_modules" in segments(skills_path):
        return ContentSource("external", skills_path)
    normalized = skills_path.replace("\\", "/")
    if "/.mastra/skills" in normalized or normalized.startswith(".mastra/skills"):
        return ContentSource("managed", skills_path)
    return ContentSource("local", skills_path)


@dataclass(frozen=True, kw_only=True)
class SkillMetadata:
    """A skill's frontmatter fields and its directory (`path`, relative to the source root)."""

    name: str
    path: str
    description: str
    license: str | None = None
    compatibility: Any = None
    user_invocable: bool | None = None
    metadata: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Mastra's `SkillMetadata` object (absent fields left out, as JSON drops `undefined`)."""
        out: dict[str, Any] = {"name": self.name, "path": self.path, "description": self.description}
        extra = {
            "license": self.license,
            "compatibility": json_safe(self.compatibility),
            "user-invocable": self.user_invocable,
            "metadata": json_safe(self.metadata),
        }
        return out | {k: v for k, v in extra.items() if v is not None}


@dataclass(frozen=True, kw_only=True)
class Skill(SkillMetadata):
    """A skill in full: the SKILL.md body and its files under ``references/``, ``scripts/``, ``assets/``
    (paths relative to each of those directories)."""

    instructions: str
    source: ContentSource
    references: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()
    assets: tuple[str, ...] = ()

    def metadata_only(self) -> SkillMetadata:
        return SkillMetadata(
            name=self.name,
            path=self.path,
            description=self.description,
            license=self.license,
            compatibility=self.compatibility,
            user_invocable=self.user_invocable,
            metadata=self.metadata,
        )

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {
            "instructions": self.instructions,
            "source": self.source.to_dict(),
            "references": list(self.references),
            "scripts": list(self.scripts),
            "assets": list(self.assets),
        }


@dataclass(frozen=True)
class SkillSearchResult:
    skill_name: str
    skill_path: str
    source: str
    """``SKILL.md`` or ``references/<file>``."""
    content: str
    score: float
    line_range: tuple[int, int] | None = None
    score_details: dict[str, float] | None = None


@dataclass(frozen=True)
class SkillLoadError:
    """A skill skipped at discovery: `path` is the SKILL.md (or skills directory) and `message` says why."""

    path: str
    message: str


def segments(path: str) -> list[str]:
    return path.replace("\\", "/").split("/")


def is_skill_file(path: str) -> bool:
    return path == "SKILL.md" or path.endswith(("/SKILL.md", "\\SKILL.md"))


def join_path(*segments: str) -> str:
    """Mastra's `#joinPath`: the first segment without trailing slashes, the others without slashes either
    side, empty ones dropped."""
    parts = [s.rstrip("/") if i == 0 else s.strip("/") for i, s in enumerate(segments)]
    return "/".join(p for p in parts if p)


def parent_path(path: str) -> str:
    slash = max(path.rfind("/"), path.rfind("\\"))
    return path[:slash] if slash > 0 else "/"


def safe_relative_path(path: str, label: str) -> str:
    """`path` with ``.`` segments dropped; `InvalidSkillPath` when absolute, with a ``..`` segment or with a NUL
    byte (no file has one in its name)."""
    normalized = path.replace("\\", "/")
    segments = [s for s in normalized.split("/") if s and s != "."]
    if normalized.startswith("/") or ".." in segments or "\0" in path:
        raise InvalidSkillPath(f"Invalid {label} path: {path}", path)
    return "/".join(segments)
