"""Which language server handles a file and how it is run: Mastra's language table, its `LSPConfig` (the
workspace's ``lsp`` option) and its built-in server definitions, with the binary lookup of each.

A Node server's binary is looked for in `binary_overrides`, the project's ``node_modules/.bin``, the working
directory's, each search path's, then PATH, then through `package_runner` (Mastra's order); `pylsp` on PATH,
then beside `sys.executable` (a virtualenv's ``bin``, on no PATH when the venv is not activated).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keel.workspace_providers.errors import WorkspaceError

LANGUAGE_EXTENSIONS: dict[str, str] = {
    ".ts": "typescript", ".tsx": "typescriptreact", ".js": "javascript", ".jsx": "javascriptreact",
    ".mjs": "javascript", ".cjs": "javascript", ".py": "python", ".pyi": "python", ".go": "go", ".rs": "rust",
    ".c": "c", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".h": "c", ".hpp": "cpp", ".java": "java",
    ".json": "json", ".jsonc": "jsonc", ".yaml": "yaml", ".yml": "yaml", ".md": "markdown", ".html": "html",
    ".css": "css", ".scss": "scss", ".sass": "sass", ".less": "less",
}  # fmt: skip
"""File extension (with the dot) to LSP language id, as Mastra's `LANGUAGE_EXTENSIONS`."""

# The languages whose server wins when several handle a file (Mastra's choice: TypeScript's over ESLint's).
PREFERRED_LANGUAGES = ("typescript", "javascript", "python", "go")


def language_id(path: str, custom: Mapping[str, str] | None = None) -> str | None:
    """The language id of `path` by its extension (the text from its last dot), custom extensions first."""
    dot = path.rfind(".")
    if dot == -1:
        return None
    ext = path[dot:]
    return (custom or {}).get(ext) or LANGUAGE_EXTENSIONS.get(ext)


# --- configuration -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LSPConfig:
    """Mastra's `LSPConfig` (``lsp: true`` is all defaults). Times in ms."""

    root: str | None = None
    """Default project root (absolute): the servers' root when no marker is found; default the workspace root."""
    diagnostic_timeout: int = 5000
    """How long an inspection waits for the server to publish the file's diagnostics."""
    init_timeout: int = 15000
    """How long a server may take to start and answer `initialize`."""
    request_timeout: int = 5000
    """How long one hover / definition / implementation request may take (Mastra: 5 s, not configurable)."""
    disable_servers: tuple[str, ...] = ()
    """Server ids never used (e.g. ``("eslint",)``)."""
    binary_overrides: Mapping[str, str] = field(default_factory=dict)
    """Server id to its full command line, bypassing every lookup (``{"typescript": "/x/tls --stdio"}``)."""
    search_paths: tuple[str, ...] = ()
    """Directories whose ``node_modules`` hold language servers and the `typescript` package, searched after the
    project root and the working directory."""
    package_runner: str | None = None
    """Last resort for Node servers not found (``"npx --yes"``, ``"pnpm dlx"``); off by default: it can hang."""
    max_open_clients: int | None = None
    """At most this many servers run; to start another, the least recently used idle one is closed first."""
    servers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Custom servers: ``{id, name, languageIds, extensions, markers, command, initializationOptions?}``; one with
    a built-in's id replaces it."""


_CONFIG_KEYS = {
    "root": "root",
    "diagnosticTimeout": "diagnostic_timeout",
    "initTimeout": "init_timeout",
    "requestTimeout": "request_timeout",
    "disableServers": "disable_servers",
    "binaryOverrides": "binary_overrides",
    "searchPaths": "search_paths",
    "packageRunner": "package_runner",
    "maxOpenClients": "max_open_clients",
    "servers": "servers",
}
_SERVER_KEYS = {"id", "name", "languageIds", "extensions", "markers", "command", "initializationOptions"}


def normalize_lsp_config(config: bool | Mapping[str, Any] | LSPConfig | None) -> LSPConfig:
    """A workspace's ``lsp`` option as an `LSPConfig`: True or None for the defaults, or a mapping with Mastra's
    camelCase or snake_case keys. An unknown key, or a custom server missing a field, raises `WorkspaceError`."""
    if isinstance(config, LSPConfig):
        return config
    if config is None or config is True:
        return LSPConfig()
    if not isinstance(config, Mapping):
        raise WorkspaceError(f"lsp config must be true or a mapping, got {type(config).__name__}")
    values: dict[str, Any] = {}
    for key, value in config.items():
        name = _CONFIG_KEYS.get(key, key)
        if name not in _CONFIG_KEYS.values():
            raise WorkspaceError(f"Unknown lsp option: {key}")
        if value is not None:
            values[name] = value
    for name in ("disable_servers", "search_paths"):
        if name in values:
            values[name] = tuple(values[name])
    for key, server in dict(values.get("servers", {})).items():
        missing = _SERVER_KEYS - {"initializationOptions"} - set(server)
        if missing:
            raise WorkspaceError(f'lsp server "{key}" is missing {", ".join(sorted(missing))}')
    limit = values.get("max_open_clients")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise WorkspaceError("maxOpenClients must be a positive integer")
    return LSPConfig(**values)


# --- servers -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerDef:
    """How to run one language server. `command(root)` is its argv, or None when it is not installed."""

    id: str
    name: str
    language_ids: tuple[str, ...]
    markers: tuple[str, ...]
    command: Callable[[str], list[str] | None]
    initialization: Callable[[str], dict[str, Any] | None] = lambda root: None
    install: str = ""
    """What to install when `command` finds nothing."""


def _node_resolve(start: str, module_path: str) -> str | None:
    """Where Node's `require.resolve(module_path)` from `start` finds a file: ``node_modules`` in `start` and up."""
    current = Path(start)
    for directory in (current, *current.parents):
        candidate = directory / "node_modules" / module_path
        if candidate.is_file():
            return str(candidate)
    return None


def _resolve_from(root: str, module_path: str, search_paths: Sequence[str]) -> str | None:
    for start in (root, os.getcwd(), *search_paths):
        if found := _node_resolve(start, module_path):
            return found
    return None


def _node_bin(root: str, binary: str, search_paths: Sequence[str]) -> str | None:
    """`node_modules/.bin/<binary>` in the project root, the working directory, then each search path."""
    for directory in (root, os.getcwd(), *search_paths):
        candidate = os.path.join(directory, "node_modules", ".bin", binary)
        if os.path.exists(candidate):
            return candidate
    return None


def _pylsp() -> str | None:
    found = shutil.which("pylsp")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "pylsp")  # a venv's bin, not on PATH when not activated
    return beside if os.access(beside, os.X_OK) else None


def _read_manifest(path: str) -> dict[str, Any]:
    """A package.json as a dict; an unreadable or malformed one as ``{}`` (a package of unknown version)."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _major_version(manifest: Mapping[str, Any]) -> int:
    """The major of the manifest's ``version`` ("7.0.1" is 7); 0 when absent or not a release ("next")."""
    major = str(manifest.get("version", "0")).split(".")[0]
    return int(major) if major.isascii() and major.isdigit() else 0


def _str_or_none(mapping: Any, key: str) -> str | None:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, str) else None


def build_server_defs(config: LSPConfig) -> dict[str, ServerDef]:
    """The built-in servers with the config's overrides, then its custom servers (Mastra's `buildServerDefs`)."""
    overrides, search, runner = config.binary_overrides, config.search_paths, config.package_runner

    def node_server(binary: str, root: str) -> list[str] | None:
        if bin_path := _node_bin(root, binary, search):
            return [bin_path, "--stdio"]
        if shutil.which(binary):
            return [binary, "--stdio"]
        return [*shlex.split(runner), binary, "--stdio"] if runner else None

    def typescript(root: str) -> list[str] | None:
        if "typescript" in overrides:
            return shlex.split(overrides["typescript"])
        if _resolve_from(root, "typescript/lib/tsserver.js", search):
            return node_server("typescript-language-server", root)
        manifest_path = _resolve_from(root, "typescript/package.json", search)
        if manifest_path is None:
            return None
        if _major_version(manifest := _read_manifest(manifest_path)) < 7:
            return None
        bin_field = manifest.get("bin")
        relative = bin_field if isinstance(bin_field, str) else _str_or_none(bin_field, "tsc")
        tsc = os.path.join(os.path.dirname(manifest_path), relative) if relative else None
        return ["node", tsc, "--lsp", "--stdio"] if tsc and os.path.exists(tsc) else None  # TypeScript 7's own LSP

    def typescript_init(root: str) -> dict[str, Any] | None:
        tsserver = _resolve_from(root, "typescript/lib/tsserver.js", search)
        if tsserver is None:
            return None
        # Beyond Mastra's options: without `useSyntaxServer: never`, a just-started server answers from its syntax
        # server while the project loads (hover `any`, no definition); one inspection is often all an agent makes.
        return {"tsserver": {"path": tsserver, "logVerbosity": "off", "useSyntaxServer": "never"}}

    def python(root: str) -> list[str] | None:
        if "python" in overrides:
            return shlex.split(overrides["python"])
        found = _pylsp()
        return [found] if found else None

    def on_path(server_id: str, argv: list[str]) -> Callable[[str], list[str] | None]:
        def command(root: str) -> list[str] | None:
            if server_id in overrides:
                return shlex.split(overrides[server_id])
            return argv if shutil.which(argv[0]) else None

        return command

    defs = {
        "typescript": ServerDef(
            "typescript",
            "TypeScript Language Server",
            ("typescript", "typescriptreact", "javascript", "javascriptreact"),
            ("tsconfig.json", "package.json"),
            typescript,
            typescript_init,
            "npm install typescript-language-server typescript@5",
        ),
        "python": ServerDef(
            "python",
            "Python Language Server (pylsp)",
            ("python",),
            ("pyproject.toml", "setup.py", "requirements.txt", "setup.cfg"),
            python,
            install="pip install python-lsp-server",
        ),
        "go": ServerDef(
            "go",
            "Go Language Server (gopls)",
            ("go",),
            ("go.mod",),
            on_path("go", ["gopls", "serve"]),
            install="go install golang.org/x/tools/gopls@latest",
        ),
        "rust": ServerDef(
            "rust",
            "Rust Language Server (rust-analyzer)",
            ("rust",),
            ("Cargo.toml",),
            on_path("rust", ["rust-analyzer", "--stdio"]),
            install="rustup component add rust-analyzer",
        ),
    }
    for custom in config.servers.values():
        defs[str(custom["id"])] = _custom_server(custom)
    return defs


def _custom_server(custom: Mapping[str, Any]) -> ServerDef:
    argv, options = shlex.split(str(custom["command"])), custom.get("initializationOptions")

    def command(root: str) -> list[str]:
        return argv

    def initialization(root: str) -> dict[str, Any] | None:
        return dict(options) if options else None

    return ServerDef(
        str(custom["id"]),
        str(custom["name"]),
        tuple(custom["languageIds"]),
        tuple(custom["markers"]),
        command,
        initialization,
        install=f"the command `{argv[0] if argv else custom['command']}`",
    )


def custom_extensions(config: LSPConfig) -> dict[str, str]:
    """Extension to language id from the custom servers (each extension to its server's first language)."""
    return {
        ext: str(server["languageIds"][0])
        for server in config.servers.values()
        if server["languageIds"]
        for ext in server["extensions"]
    }
