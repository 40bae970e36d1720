"""The DuckDB audit store: raw records, their hash chain and the consumed offsets, one transaction per batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from audit.chain import genesis, link
from audit.migrations import migrate
from audit.records import RECORD_TYPES
from audit.store import RawRecord
from streams.errors import StoreError

_BATCH_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_ts_ms", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("chain_hash", pa.binary(32)),
    ]
)
_HEADS_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("next_offset", pa.int64()), ("chain_head", pa.binary(32))]
)


def classify(source: str) -> str:
    """``source``'s rows with the record type and id of each: one JSON parse per record. A well-formed
    audit record gives its own; anything else is kept as type 'invalid' with a content hash for id."""
    return f"""
    SELECT topic, "partition", "offset", kafka_ts_ms, key, value,
           CASE WHEN ok THEN c.type ELSE 'invalid' END AS record_type,
           CASE WHEN ok THEN c.id ELSE left(sha256(value), 32) END AS record_id,
           chain_hash
    FROM (
        SELECT *, coalesce(c.v = 1 AND c.type IN {RECORD_TYPES!r} AND c.id IS NOT NULL
                           AND json_type(c.body) = 'OBJECT', false) AS ok
        FROM (SELECT *, try(json_transform(decode(value),
                            '{{"v": "INTEGER", "type": "VARCHAR", "id": "VARCHAR", "body": "JSON"}}')) AS c
              FROM {source})
    )
    """


# The records of each type are read through the views of sql/migrations/0002_records.sql: nothing but the
# raw records (and their type and id, for filtering) is stored.
_INSERTS = [
    'INSERT INTO audit_log (topic, "partition", "offset", kafka_ts_ms, key, value, record_type, record_id,'
    f" chain_hash) {classify('batch')}",
    "INSERT OR REPLACE INTO sink_offsets SELECT * FROM new_offsets",
]


@dataclass(frozen=True)
class Prepared:
    """A batch ready to commit: its rows, its offsets and the chain heads after it."""

    table: pa.Table
    offsets: pa.Table
    heads: dict[tuple[str, int], bytes]
    nexts: dict[tuple[str, int], int]


class DuckDBStore:
    """Single writer of one DuckDB file and the only write path into it. Opening applies pending
    migrations. File and network access through SQL are disabled on its connection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.con = duckdb.connect(str(path), config={"enable_external_access": False})
        except duckdb.IOException as exc:
            raise StoreError(f"cannot open {path} for writing (is another process using it?): {exc}") from exc
        migrate(self.con)
        self.con.execute("SET wal_autocheckpoint = '256MB'")
        self.con.execute("SET lock_configuration = true")
        rows = self.con.execute('SELECT topic, "partition", next_offset, chain_head FROM sink_offsets').fetchall()
        self._next = {(t, p): o for t, p, o, _ in rows}
        self._heads = {(t, p): bytes(h) for t, p, _, h in rows}
        self._pending_next, self._pending_heads = dict(self._next), dict(self._heads)  # as prepared
        self._aux = self.con.cursor()

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    def write(self, batch: Sequence[RawRecord]) -> None:
        """Append the records not yet stored (offsets below the stored next offset are re-deliveries and
        are skipped), their chain hashes and the new offsets, in one transaction."""
        prepared = self.prepare(batch)
        if prepared is not None:
            self.commit(prepared)

    def prepare(self, batch: Sequence[RawRecord]) -> Prepared | None:
        """The Python half of :meth:`write` (filter, hash, build Arrow), so that a caller can prepare the
        next batch while :meth:`commit` of the previous one runs in DuckDB. Batches must be committed in
        the order they were prepared."""
        fresh = [r for r in batch if r.offset >= self._pending_next.get((r.topic, r.partition), -1)]
        if not fresh:
            return None
        heads = dict(self._pending_heads)
        nexts = dict(self._pending_next)
        hashes = []
        for r in fresh:
            tp = (r.topic, r.partition)
            h = link(heads[tp] if tp in heads else genesis(*tp), r)
            hashes.append(h)
            heads[tp] = h
            nexts[tp] = r.offset + 1
        table = pa.Table.from_arrays(
            [
                pa.array([r.topic for r in fresh], pa.string()),
                pa.array([r.partition for r in fresh], pa.int32()),
                pa.array([r.offset for r in fresh], pa.int64()),
                pa.array([r.timestamp_ms for r in fresh], pa.int64()),
                pa.array([r.key for r in fresh], pa.binary()),
                pa.array([r.value for r in fresh], pa.binary()),
                pa.array(hashes, pa.binary(32)),
            ],
            schema=_BATCH_SCHEMA,
        )
        touched = sorted({(r.topic, r.partition) for r in fresh})
        offsets = pa.Table.from_arrays(
            [
                pa.array([t for t, _ in touched], pa.string()),
                pa.array([p for _, p in touched], pa.int32()),
                pa.array([nexts[tp] for tp in touched], pa.int64()),
                pa.array([heads[tp] for tp in touched], pa.binary(32)),
            ],
            schema=_HEADS_SCHEMA,
        )
        self._pending_heads, self._pending_next = heads, nexts
        return Prepared(table, offsets, heads, nexts)

    def commit(self, prepared: Prepared) -> None:
        """Store a prepared batch in one transaction; on failure nothing of it is stored and the store
        forgets every batch prepared after the last commit."""
        try:
            self._commit(prepared.table, prepared.offsets)
        except StoreError:
            self._pending_heads, self._pending_next = dict(self._heads), dict(self._next)
            raise
        self._heads, self._next = prepared.heads, prepared.nexts

    def _commit(self, table: pa.Table, offsets: pa.Table) -> None:
        con = self.con
        con.register("batch", table)
        con.register("new_offsets", offsets)
        try:
            con.execute("BEGIN")
            for statement in _INSERTS:
                con.execute(statement)
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise StoreError(f"writing {table.num_rows} audit records failed, nothing was stored: {exc}") from exc
        finally:
            con.unregister("batch")
            con.unregister("new_offsets")

    def add_checkpoint(self, seq: int, line: dict[str, str]) -> None:
        """Record a signed checkpoint (already written to the checkpoint file and topic). Its own connection:
        a batch may be committing on the main one meanwhile."""
        self._aux.execute(
            "INSERT INTO checkpoints SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM checkpoints WHERE seq = ?)",
            [seq, line["payload"], line["signature"], line["key_id"], seq],
        )

    def heads(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        """Per partition: (next offset, chain head) as committed."""
        return {tp: (self._next[tp], self._heads[tp]) for tp in self._heads}

    def close(self) -> None:
        self._aux.close()
        self.con.close()
