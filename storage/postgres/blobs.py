"""PostgreSQL: blobs, in the `payloads` table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from keel.storage.blobs import BlobNotFound, BlobStore
from keel.storage.postgres.pool import PostgresPool, guarded


class PostgresBlobs(PostgresPool, BlobStore):
    @property
    def location(self) -> str:
        return "the payloads table"

    @guarded
    async def put_blobs(self, blobs: Mapping[str, bytes]) -> None:
        if not blobs:
            return
        pool = await self._get_pool()
        await pool.execute(
            "INSERT INTO payloads (key, data, created_at)"
            " SELECT k, d, $3 FROM unnest($1::text[], $2::bytea[]) AS u(k, d) ON CONFLICT (key) DO NOTHING",
            list(blobs),
            list(blobs.values()),
            datetime.now(UTC),
        )

    @guarded
    async def get_blobs(self, keys: Sequence[str]) -> list[bytes]:
        if not keys:
            return []
        pool = await self._get_pool()
        rows = await pool.fetch("SELECT key, data FROM payloads WHERE key = ANY($1::text[])", list(set(keys)))
        by_key = {r["key"]: bytes(r["data"]) for r in rows}
        missing = [k for k in keys if k not in by_key]
        if missing:
            raise BlobNotFound(f"Payloads {', '.join(missing)} are not in the payloads table")
        return [by_key[k] for k in keys]
