"""`CompositeFilesystem`: several filesystems under path prefixes (a workspace's `mounts`), each path routed to
the mount with the longest matching prefix, with the prefix stripped (`/data/a.txt` → `a.txt` of `/data`)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from keel.workspace_providers.errors import FileNotFound, PermissionDenied, WorkspaceError
from keel.workspace_providers.types import FileEntry


class CompositeFilesystem:
    provider = "composite"
    name = "CompositeFilesystem"

    def __init__(self, mounts: Mapping[str, Any]) -> None:
        self.mounts: dict[str, Any] = {}
        for prefix, fs in mounts.items():
            clean = "/" + posixpath.normpath(prefix).strip("/")
            if clean == "/":
                raise WorkspaceError('A mount path cannot be "/"')
            if clean in self.mounts:
                raise WorkspaceError(f"Two mounts at {clean!r}")
            self.mounts[clean] = fs
        self.id = "composite-" + "-".join(fs.id for fs in self.mounts.values())
        self.read_only = all(getattr(fs, "read_only", False) for fs in self.mounts.values())
        self.status = "pending"

    @property
    def scope(self) -> str:
        return "composite:" + ",".join(f"{p}={getattr(fs, 'scope', fs.id)}" for p, fs in sorted(self.mounts.items()))

    def route(self, path: str) -> tuple[Any, str]:
        """The mount `path` falls in and the path inside it; outside every mount → `PermissionDenied`."""
        clean = "/" + posixpath.normpath(path.replace("\\", "/")).strip("/.")
        for prefix in sorted(self.mounts, key=len, reverse=True):
            if clean == prefix or clean.startswith(prefix + "/"):
                return self.mounts[prefix], clean[len(prefix) :].lstrip("/") or "."
        raise PermissionDenied(path, f"access (no mount contains it; mounts: {', '.join(sorted(self.mounts))})")

    async def init(self) -> None:
        for fs in self.mounts.values():
            await fs.init()
        self.status = "ready"

    async def destroy(self) -> None:
        for fs in self.mounts.values():
            await fs.destroy()
        self.status = "destroyed"

    def get_info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "provider": self.provider,
            "status": self.status,
            "metadata": {"mounts": {p: fs.get_info() for p, fs in self.mounts.items()}},
        }

    def get_instructions(self, request_context: Mapping[str, Any] | None = None) -> str:
        lines = [
            f"  - {p}: {fs.name} ({'read-only' if fs.read_only else 'read-write'})" for p, fs in self.mounts.items()
        ]
        return "Mounted filesystems (use these path prefixes):\n" + "\n".join(lines)

    async def readdir(self, path: str = ".", **options: Any) -> list[FileEntry]:
        if posixpath.normpath("/" + path.strip("/")) == "/":
            return [FileEntry(name=p.strip("/"), type="directory") for p in sorted(self.mounts)]
        fs, inner = self.route(path)
        entries: list[FileEntry] = await fs.readdir(inner, **options)
        return entries

    async def exists(self, path: str) -> bool:
        try:
            fs, inner = self.route(path)
        except PermissionDenied:
            return False
        return bool(await fs.exists(inner))

    def __getattr__(self, method: str) -> Any:
        """Every other operation (`read_file`, `write_file`, `stat`, `list_tree`, `grep`, ...) on the mount of
        its path (`path`, or the first argument; copy and move need both ends in one mount)."""
        if method.startswith("_") or method not in _ROUTED:
            raise AttributeError(method)

        async def routed(*args: Any, **kwargs: Any) -> Any:
            if method in ("copy_file", "move_file"):
                src_fs, src = self.route(args[0])
                dst_fs, dst = self.route(args[1])
                if src_fs is not dst_fs:
                    raise WorkspaceError(f"{method}: {args[0]!r} and {args[1]!r} are in different mounts")
                return await getattr(src_fs, method)(src, dst, *args[2:], **kwargs)
            path = kwargs.pop("path", None) if method == "grep" else None
            if method == "grep":
                fs, inner = self.route(path or "/")
                return await fs.grep(*args, path=inner, **kwargs)
            if not args:
                raise FileNotFound(".")
            fs, inner = self.route(args[0])
            return await getattr(fs, method)(inner, *args[1:], **kwargs)

        return routed


_ROUTED = {
    "read_file",
    "write_file",
    "append_file",
    "edit_file",
    "delete_file",
    "copy_file",
    "move_file",
    "mkdir",
    "rmdir",
    "delete",
    "stat",
    "list_tree",
    "grep",
}
