"""What commands in a `LocalSandbox` see of a workspace's `mounts` (Mastra's `MountManager` with its
`LocalSandbox.mount()`).

Where a mount appears: at ``<working directory>/<mount path>`` (``/src`` is ``./src`` where commands start, as in
Mastra's LocalSandbox), a symlink to the mounted directory; under bubblewrap also at the mount path itself
(``/src``, bind-mounted, read-only when the filesystem is), unless that path would cover one the sandbox needs
(``/usr``, ``/tmp``, the working directory...). A `LocalFilesystem` mount is its base path.

An `S3Filesystem` mount is not visible to commands (Mastra's LocalSandbox refuses it too): seeing a bucket as files
takes a FUSE driver the sandbox cannot count on, and copying the objects in before a command and back after it
would race the file tools and other commands writing the same keys, with no bound on the size. A command that
names such a mount's path gets a line on stderr saying so, and the sandbox's instructions list what commands see.
The `on_mount` hook can do better where the host allows it: called before each mount, it returns False (skip),
``{"success": True, "host_path": DIR}`` (a directory it made hold the mount, a FUSE mount say: shown as a local
one), ``{"success": False, "error": ...}``, or None (the default above).

An entry's state, as Mastra's: ``pending`` (until the sandbox starts), ``mounted``, ``unsupported`` (commands cannot
see it), ``error`` (the path is taken by something else, or the hook failed).
"""

from __future__ import annotations

import inspect
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

logger = logging.getLogger(__name__)

MountState = Literal["pending", "mounted", "unsupported", "error"]
SAFE_MOUNT_PATH = re.compile(r"/[a-zA-Z0-9_.\-/]+")
"""Mastra's allowlist for a mount path: absolute, with safe characters only."""


@dataclass
class MountEntry:
    """One mount as the sandbox shows it."""

    path: str
    filesystem: Any
    state: MountState = "pending"
    host_path: str | None = None
    """The host directory commands see at the mount (a `LocalFilesystem`'s base path)."""
    link: str | None = None
    """The symlink ``<working directory>/<mount path>`` pointing at `host_path`."""
    read_only: bool = False
    error: str | None = None


@dataclass(frozen=True)
class OnMountArgs:
    """What the `on_mount` hook is given (Mastra's `onMount` argument, plus where the sandbox would link it)."""

    filesystem: Any
    mount_path: str
    config: Mapping[str, Any] | None
    sandbox: Any
    workspace: Any
    link: str


OnMount = Callable[[OnMountArgs], Any]
"""Returns False, None, or ``{"success": bool, "error"?: str, "host_path"?: str}`` (or an awaitable of one)."""


def overlaps(a: str, b: str) -> bool:
    """Whether one of two absolute paths is the other or inside it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


class SandboxMounts:
    """The mounts of one sandbox, whose commands start in `working_directory`."""

    def __init__(self, working_directory: str) -> None:
        self.working_directory = working_directory
        self.entries: dict[str, MountEntry] = {}
        self._on_mount: OnMount | None = None
        self._sandbox: Any = None
        self._workspace: Any = None

    def set_context(self, sandbox: Any, workspace: Any) -> None:
        self._sandbox, self._workspace = sandbox, workspace

    def set_on_mount(self, hook: OnMount | None) -> None:
        self._on_mount = hook

    def add(self, mounts: Mapping[str, Any]) -> None:
        """Mounts to show once the sandbox starts (normalised paths, as `CompositeFilesystem` keeps them)."""
        for path, filesystem in mounts.items():
            self.entries[path] = MountEntry(path, filesystem, read_only=bool(getattr(filesystem, "read_only", False)))

    def get(self, path: str) -> MountEntry | None:
        return self.entries.get(path)

    def link_of(self, path: str) -> str:
        return os.path.join(self.working_directory, path.lstrip("/"))

    async def process_pending(self) -> None:
        """Mount every pending entry: the hook first, then the default for its filesystem's kind."""
        for entry in self.entries.values():
            if entry.state == "pending":
                await self._mount(entry)

    async def _mount(self, entry: MountEntry) -> None:
        fs = entry.filesystem
        config_of = getattr(fs, "get_mount_config", None)
        config: Mapping[str, Any] | None = config_of() if config_of is not None else None
        entry.link = self.link_of(entry.path)
        if not SAFE_MOUNT_PATH.fullmatch(entry.path) or any(s in (".", "..") for s in entry.path.split("/")):
            self._fail(entry, "error", f"Invalid mount path: {entry.path}")
            return
        host: str | None = None
        if self._on_mount is not None:
            args = OnMountArgs(fs, entry.path, config, self._sandbox, self._workspace, entry.link)
            try:
                answer = self._on_mount(args)
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception as err:
                self._fail(entry, "error", f"Mount hook error: {err}")
                return
            if answer is False:
                self._fail(entry, "unsupported", "Skipped by onMount hook")
                return
            if isinstance(answer, Mapping):
                if not answer.get("success"):
                    self._fail(entry, "error", str(answer.get("error") or "Mount hook failed"))
                    return
                host = answer.get("host_path")
                if host is None:  # the hook made the mount visible itself
                    entry.state = "mounted"
                    return
        if host is None:
            if config is None:
                self._fail(entry, "unsupported", "Filesystem does not support mounting")
                return
            kind = config.get("type")
            if kind != "local":
                why = f"{fs.name} mounts need FUSE, which this sandbox does not use" if kind == "s3" else ""
                self._fail(entry, "unsupported", why or f"Unsupported mount type: {kind}")
                return
            host = str(config["basePath"])
        try:
            entry.host_path = os.path.realpath(host)
            if entry.host_path == "/":
                raise OSError('the host root "/" cannot be mounted')
            _link(entry.link, entry.host_path)
        except OSError as err:
            self._fail(entry, "error", f"Cannot mount at {entry.link}: {err}")
            return
        entry.state = "mounted"

    def _fail(self, entry: MountEntry, state: MountState, error: str) -> None:
        entry.state, entry.error = state, error
        log = logger.info if state == "unsupported" else logger.warning
        log("mount %s not shown to commands: %s", entry.path, error)

    def unmount_all(self) -> None:
        """Remove the symlinks this sandbox made (the mounted files stay); the entries become pending again."""
        for entry in self.entries.values():
            if entry.state == "mounted" and entry.link and os.path.islink(entry.link):
                try:
                    os.unlink(entry.link)
                except OSError as err:
                    logger.warning("could not remove the mount link %s: %s", entry.link, err)
            entry.state, entry.error, entry.host_path = "pending", None, None

    # --- what a command sees ----------------------------------------------------------------------------------

    def binds(self, reserved: Sequence[str]) -> list[tuple[str, str, bool]]:
        """Bubblewrap's binds for the mounted entries, as (host path, path inside, read-only): each directory at
        its own path (what the symlink names) and at the mount path when that covers none of `reserved`."""
        found: list[tuple[str, str, bool]] = []
        mounted = [e for e in self.entries.values() if e.state == "mounted" and e.host_path]
        hosts = [e.host_path for e in mounted if e.host_path]
        for entry in mounted:
            assert entry.host_path is not None
            found.append((entry.host_path, entry.host_path, entry.read_only))
            if entry.path != entry.host_path and self.absolute(entry, [*reserved, *hosts]):
                found.append((entry.host_path, entry.path, entry.read_only))
        return found

    def absolute(self, entry: MountEntry, reserved: Sequence[str]) -> bool:
        """Whether bubblewrap can show `entry` at its own path too."""
        return not any(overlaps(entry.path, p) for p in reserved if p)

    def host_dir(self, path: str) -> str | None:
        """The host directory for an absolute `path` under a mounted entry's path (through its link), else None."""
        for entry in self.entries.values():
            if entry.state == "mounted" and entry.link and (path == entry.path or path.startswith(entry.path + "/")):
                return entry.link + path[len(entry.path) :]
        return None

    def notes(self, command: str) -> list[str]:
        """A line for each mount commands cannot see whose path `command` names (``/data``, ``./data``,
        ``data/x``...)."""
        lines = []
        for entry in self.entries.values():
            if entry.state == "mounted":
                continue
            name = re.escape(entry.path.lstrip("/"))
            if re.search(rf"(?<![\w./-])(?:/|\./)?{name}(?![\w.-])", command):
                lines.append(
                    f"keel: {entry.path} is a mount ({entry.filesystem.name}) that commands in this sandbox cannot "
                    f"see ({entry.error}); read and write it with the workspace file tools (paths under {entry.path})"
                )
        return lines

    def instructions(self, *, isolated: bool, reserved: Sequence[str]) -> str:
        """What commands see of the mounts, for the sandbox's instructions."""
        if not self.entries:
            return ""
        lines = ["Workspace mounts in commands:"]
        for entry in self.entries.values():
            relative = "./" + entry.path.lstrip("/")
            if entry.state == "mounted":
                also = f" (also {entry.path})" if isolated and self.absolute(entry, reserved) else ""
                ro = ", read-only" if entry.read_only and isolated else ""
                lines.append(f"- {entry.path}: {relative}{also}{ro}")
            elif entry.state == "pending":
                lines.append(f"- {entry.path}: {relative} once the sandbox starts")
            else:
                lines.append(f"- {entry.path}: not visible to commands; use the file tools for paths under it")
        return "\n".join(lines)


def _link(link: str, target: str) -> None:
    """`link` → `target`: a symlink already there to `target` is kept, one elsewhere or an empty directory is
    replaced; anything else there is an error (Mastra: mounting would hide it)."""
    if os.path.islink(link):
        if os.path.realpath(link) == target:
            return
        os.unlink(link)
    elif os.path.isdir(link):
        if os.listdir(link):
            raise OSError("directory exists and is not empty; mounting would hide its files")
        os.rmdir(link)
    elif os.path.lexists(link):
        raise OSError("a file is there")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    try:
        os.symlink(target, link)
    except FileExistsError:  # another worker on this host linked it meanwhile
        if os.path.realpath(link) != target:
            raise
