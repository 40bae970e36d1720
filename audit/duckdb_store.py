"""The DuckDB audit store: raw records, derived tables and consumed offsets in one transaction per batch."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from audit.chain import genesis, link
from audit.migrations import migrate
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
        ("record_type", pa.string()),
        ("record_id", pa.string()),
        ("chain_hash", pa.binary(32)),
    ]
)
_HEADS_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("next_offset", pa.int64()), ("chain_head", pa.binary(32))]
)

# Derived tables are filled by DuckDB from the JSON of the records just inserted (vectorised, no Python
# per row). Rows whose id is already stored (a worker re-delivery) are skipped by an anti-join: the tables
# carry append-only triggers, and DuckDB refuses INSERT OR IGNORE (MERGE) on tables with triggers.
_BODY = (
    '(SELECT record_id, "partition", "offset", CAST(decode(value) AS JSON) AS j'
    " FROM {source} WHERE record_type = '{record_type}')"
)
_SOURCE = "j->>'$.source.topic', CAST(j->>'$.source.partition' AS INTEGER), CAST(j->>'$.source.offset' AS BIGINT)"


@dataclass(frozen=True)
class Derived:
    """How one table is derived from audit records of one type (first occurrence of an id wins)."""

    table: str
    record_type: str
    columns: str
    key: str = "record_id"

    def select(self, source: str) -> str:
        body = _BODY.format(source=source, record_type=self.record_type)
        return (
            f"SELECT {self.columns}, {_SOURCE} FROM {body}"
            f' QUALIFY row_number() OVER (PARTITION BY {self.key} ORDER BY "partition", "offset") = 1'
        )

    def insert(self) -> str:
        return (
            f"INSERT INTO {self.table} SELECT * FROM ({self.select('batch')}) AS x"
            f" WHERE NOT EXISTS (SELECT 1 FROM {self.table} AS t WHERE t.id = x.id)"
        )


DERIVED = [
    Derived(
        "findings",
        "finding",
        "record_id AS id, j->>'$.body.kind', CAST(j->'$.body.subjects' AS VARCHAR[]),"
        " CAST(j->>'$.body.start' AS DOUBLE), CAST(j->>'$.body.end' AS DOUBLE), CAST(j->>'$.body.severity' AS DOUBLE),"
        " j->'$.body.evidence', j->'$.body.cost'",
    ),
    Derived(
        "dead_letters",
        "dead_letter",
        "record_id AS id, j->>'$.body.reason', j->>'$.body.detail', CAST(j->>'$.body.count' AS INTEGER),"
        " CAST(j->'$.body.indices' AS INTEGER[]), CAST(j->>'$.body.whole_message' AS BOOLEAN),"
        " j->>'$.body.original_sha256', CAST(j->>'$.body.original_bytes' AS BIGINT)",
    ),
    Derived(
        "decisions",
        "decision",
        "j->>'$.body.id' AS id, CAST(j->>'$.body.time' AS DOUBLE), j->>'$.body.controller', j->>'$.body.layer',"
        " j->>'$.body.action', CAST(j->'$.body.targets' AS VARCHAR[]), j->'$.body.parameters', j->>'$.body.reason',"
        " j->>'$.body.expected_effect.metric', j->>'$.body.expected_effect.direction', j->>'$.body.job'",
        "j->>'$.body.id'",
    ),
    Derived(
        "attributions",
        "attribution",
        "record_id AS id, j->>'$.body.finding_id', CAST(j->>'$.body.rank' AS INTEGER), j->>'$.body.cause_kind',"
        " j->>'$.body.cause', CAST(j->>'$.body.share' AS DOUBLE), CAST(j->>'$.body.slowdown' AS DOUBLE),"
        " CAST(j->>'$.body.cost_accel_s' AS DOUBLE), j->'$.body.evidence'",
    ),
    Derived(
        "graph_snapshots",
        "graph_snapshot",
        "record_id AS id, j->>'$.body.job', CAST(j->>'$.body.valid_from' AS DOUBLE), j->>'$.body.digest',"
        " j->'$.body.nodes', j->'$.body.edges'",
    ),
    Derived(
        "metrics_rollup",
        "metrics_rollup",
        "record_id AS id, j->>'$.body.job', j->>'$.body.entity', j->>'$.body.name',"
        " CAST(j->>'$.body.window_start' AS DOUBLE), CAST(j->>'$.body.window_end' AS DOUBLE),"
        " CAST(j->>'$.body.n' AS BIGINT), CAST(j->>'$.body.mean' AS DOUBLE),"
        " CAST(j->>'$.body.p50' AS DOUBLE), CAST(j->>'$.body.p99' AS DOUBLE), CAST(j->>'$.body.min' AS DOUBLE),"
        " CAST(j->>'$.body.max' AS DOUBLE), CAST(j->>'$.body.total' AS DOUBLE)",
    ),
]
_INSERTS = [d.insert() for d in DERIVED]
RECORD_TYPES = ("finding", "dead_letter", "decision", "attribution", "graph_snapshot", "metrics_rollup")


def _classify(value: bytes) -> tuple[str, str]:
    """(record_type, record_id) of an audit record; foreign or broken bytes are kept as type 'invalid'."""
    try:
        doc = orjson.loads(value)
        if isinstance(doc, dict) and isinstance(doc.get("type"), str) and isinstance(doc.get("id"), str):
            if doc["type"] not in RECORD_TYPES or not isinstance(doc.get("body"), dict):
                raise ValueError("not a known audit record")
            return doc["type"], doc["id"]
    except ValueError:
        pass
    return "invalid", hashlib.sha256(value).hexdigest()[:32]


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
        self.con.execute("SET lock_configuration = true")
        rows = self.con.execute('SELECT topic, "partition", next_offset, chain_head FROM sink_offsets').fetchall()
        self._next = {(t, p): o for t, p, o, _ in rows}
        self._heads = {(t, p): bytes(h) for t, p, _, h in rows}

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    def write(self, batch: Sequence[RawRecord]) -> None:
        """Append the records not yet stored (offsets below the stored next offset are re-deliveries and
        are skipped), their chain hashes, the derived rows and the new offsets, in one transaction."""
        fresh = [r for r in batch if r.offset >= self._next.get((r.topic, r.partition), -1)]
        if not fresh:
            return
        heads = dict(self._heads)
        nexts = dict(self._next)
        hashes = []
        for r in fresh:
            tp = (r.topic, r.partition)
            h = link(heads[tp] if tp in heads else genesis(*tp), r)
            hashes.append(h)
            heads[tp] = h
            nexts[tp] = r.offset + 1
        kinds = [_classify(r.value) for r in fresh]
        table = pa.Table.from_arrays(
            [
                pa.array([r.topic for r in fresh], pa.string()),
                pa.array([r.partition for r in fresh], pa.int32()),
                pa.array([r.offset for r in fresh], pa.int64()),
                pa.array([r.timestamp_ms for r in fresh], pa.int64()),
                pa.array([r.key for r in fresh], pa.binary()),
                pa.array([r.value for r in fresh], pa.binary()),
                pa.array([k[0] for k in kinds], pa.string()),
                pa.array([k[1] for k in kinds], pa.string()),
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
        self._commit(table, offsets)
        self._heads, self._next = heads, nexts

    def _commit(self, table: pa.Table, offsets: pa.Table) -> None:
        con = self.con
        con.register("batch", table)
        con.register("new_offsets", offsets)
        try:
            con.execute("BEGIN")
            con.execute(
                'INSERT INTO audit_log (topic, "partition", "offset", kafka_ts_ms, key, value, record_type,'
                " record_id, chain_hash) SELECT * FROM batch"
            )
            for statement in _INSERTS:
                con.execute(statement)
            con.execute("INSERT OR REPLACE INTO sink_offsets SELECT * FROM new_offsets")
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise StoreError(f"writing {table.num_rows} audit records failed, nothing was stored: {exc}") from exc
        finally:
            con.unregister("batch")
            con.unregister("new_offsets")

    def add_checkpoint(self, seq: int, line: dict[str, str]) -> None:
        """Record a signed checkpoint (already written to the checkpoint file and topic)."""
        self.con.execute(
            "INSERT INTO checkpoints SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM checkpoints WHERE seq = ?)",
            [seq, line["payload"], line["signature"], line["key_id"], seq],
        )

    def heads(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        """Per partition: (next offset, chain head) as committed."""
        return {tp: (self._next[tp], self._heads[tp]) for tp in self._heads}

    def close(self) -> None:
        self.con.close()
