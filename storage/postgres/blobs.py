"""PostgreSQL: blobs, in the `payloads` table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from keel.storage.blobs import UNKNOWN_OWNER, BlobNotFound, BlobStore, StoredBlob
from keel.storage.postgres.pool import PostgresPool, guarded


class PostgresBlobs(PostgresPool, BlobStore):
    @property
    def location(self) -> str:
        return "the payloads table"

    @guarded
    async def put_blobs(self, blobs: Mapping[str, bytes], *, owner: str | None = None) -> None:
        if not blobs:
            return
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO payloads (key, data, created_at, last_put_at)"
                " SELECT k, d, $3, $3 FROM unnest($1::text[], $2::bytea[]) AS u(k, d)"
                " ON CONFLICT (key) DO UPDATE SET last_put_at = EXCLUDED.last_put_at",
                list(blobs),
                list(blobs.values()),
                datetime.now(UTC),
            )
            await conn.execute(
                "INSERT INTO payload_owners (key, workflow_id) SELECT k, $2 FROM unnest($1::text[]) AS u(k)"
                " ON CONFLICT DO NOTHING",
                list(blobs),
                owner or UNKNOWN_OWNER,
            )

    @guarded
    async def list_blobs(self, *, after: str = "", limit: int = 500) -> list[StoredBlob]:
        pool = await self._get_pool()
        rows = await pool.fetch(
            "SELECT p.key, octet_length(p.data) AS size, p.last_put_at,"
            " coalesce(array_agg(o.workflow_id ORDER BY o.workflow_id) FILTER (WHERE o.workflow_id IS NOT NULL),"
            " '{}') AS owners"
            " FROM payloads p LEFT JOIN payload_owners o ON o.key = p.key"
            " WHERE p.key > $1 GROUP BY p.key ORDER BY p.key LIMIT $2",
            after,
            limit,
        )
        return [StoredBlob(r["key"], r["size"], r["last_put_at"], tuple(r["owners"])) for r in rows]

    @guarded
    async def delete_blobs(self, keys: Sequence[str], *, put_before: datetime) -> list[str]:
        if not keys:
            return []
        pool = await self._get_pool()
        # A put renewing `last_put_at` meanwhile locks the row: the DELETE re-checks it once that put commits.
        rows = await pool.fetch(
            "DELETE FROM payloads WHERE key = ANY($1::text[]) AND last_put_at < $2 RETURNING key",
            list(keys),
            put_before,
        )
        return [r["key"] for r in rows]

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
