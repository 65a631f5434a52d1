"""Numbered schema migrations per dialect, and the version table that records which ones a database has.

`schema/<dialect>/NNNN_name.sql` holds migration NNNN (numbered from 0001 without gaps; never edited once
released: a change is a new file). `keel_schema_migrations` has one row per applied migration. Each backend's
`init()` applies the pending ones in order, in one transaction under its own lock, so concurrent initialisers
apply each migration once. Migration 0001 is the schema as it was before versioning (every statement
`IF NOT EXISTS`), so a database created by that code is adopted as version 1 and upgraded from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from keel.storage.errors import SchemaError

Dialect = Literal["sqlite", "postgres"]
VERSION_TABLE = "keel_schema_migrations"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """The file's statements (split on `;`: migrations hold no literal semicolons)."""
        return [s.strip() for s in self.sql.split(";") if s.strip()]


def migrations(dialect: Dialect) -> list[Migration]:
    """Every migration of a dialect, in order. Raises `SchemaError` for a gap or a misnamed file."""
    found: list[Migration] = []
    for entry in resources.files("keel.storage").joinpath("schema", dialect).iterdir():
        match = _FILE.match(entry.name)
        if match is None:
            raise SchemaError(f"Unexpected file {entry.name!r} in the {dialect} migrations")
        found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise SchemaError(f"{dialect} migrations skip from {expected - 1} to {migration.version}")
    return found


def pending(dialect: Dialect, applied: int) -> list[Migration]:
    """The migrations a database at version `applied` still needs."""
    known = migrations(dialect)
    if applied > len(known):
        raise SchemaError(
            f"The database schema is at version {applied}, newer than this Keel knows ({len(known)}): "
            "upgrade Keel, or point KEEL_STORAGE_URL at another database"
        )
    return known[applied:]


def latest(dialect: Dialect) -> int:
    return len(migrations(dialect))
