"""Bubblewrap (`bwrap`) isolation for the local sandbox: finding the binary and building its argv, after Mastra's
`native-sandbox/bubblewrap.ts` and `detect.ts`.

The sandbox gets fresh PID, IPC, UTS and network namespaces, a read-only view of the system paths commands need, a
private `/tmp`, `/proc` and `/dev`, and write access only to the working directory and the writable paths.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

from keel.workspace_providers.errors import IsolationUnavailable

# Mounted read-only with --ro-bind-try (skipped where missing), as in Mastra.
SYSTEM_PATHS = (
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/localtime",
)
RUNTIME_PATHS = ("/opt", "/snap")

INSTALL_HINT = (
    "Linux bubblewrap (bwrap) not found. Install with: apt install bubblewrap (Debian/Ubuntu) "
    "or dnf install bubblewrap (Fedora)"
)


def find_bwrap() -> str:
    """The path of `bwrap` on PATH.

    Raises:
        IsolationUnavailable: not on Linux, or bubblewrap is not installed (the message names the package).
    """
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable(
            f"Isolation backend 'bwrap' is not available: bubblewrap needs Linux, not {sys.platform}"
        )
    path = shutil.which("bwrap")
    if path is None:
        raise IsolationUnavailable(f"Isolation backend 'bwrap' is not available: {INSTALL_HINT}")
    return path


def _covered(path: str) -> bool:
    return any(path == p or path.startswith(p + os.sep) for p in SYSTEM_PATHS)


def reserved_paths(working_directory: str, writable_paths: Sequence[str] = ()) -> list[str]:
    """The paths the sandbox's own view needs: a workspace mount is not bound over (or above) one of these."""
    own = ("/tmp", "/proc", "/dev", sys.base_prefix, working_directory, *writable_paths)
    return [*SYSTEM_PATHS, *RUNTIME_PATHS, *own]


def bwrap_argv(
    bwrap: str,
    script: str,
    *,
    working_directory: str,
    cwd: str,
    writable_paths: Sequence[str] = (),
    mounts: Sequence[tuple[str, str, bool]] = (),
) -> list[str]:
    """The argv that runs `sh -c script` in `cwd` inside a bubblewrap sandbox; `mounts` are more binds, each
    (host directory, path inside, read-only).

    Beyond Mastra's flags: `--remount-ro /` (so writes outside the binds fail instead of landing in bwrap's scratch
    root), `--cap-drop ALL` (bwrap keeps root's capabilities otherwise, and they would allow remounting) and
    `--new-session` (no TIOCSTI into the caller's terminal). The environment is the one bwrap itself is given.
    """
    argv = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--proc", "/proc"]
    argv += ["--tmpfs", "/tmp"]
    for path in SYSTEM_PATHS:
        argv += ["--ro-bind-try", path, path]
    # The worker's own Python, like Mastra mounting Node's directory.
    if not _covered(sys.base_prefix):
        argv += ["--ro-bind", sys.base_prefix, sys.base_prefix]
    for path in RUNTIME_PATHS:
        argv += ["--ro-bind-try", path, path]
    argv += ["--bind", working_directory, working_directory]
    for path in writable_paths:
        argv += ["--bind", path, path]
    for host, inside, read_only in mounts:
        argv += ["--ro-bind" if read_only else "--bind", host, inside]
    # After every bind: a later bind of /dev would shadow the device nodes, and mount points need a writable root.
    argv += ["--dev", "/dev", "--remount-ro", "/"]
    argv += ["--cap-drop", "ALL", "--new-session", "--die-with-parent", "--chdir", cwd, "--", "sh", "-c", script]
    return argv
