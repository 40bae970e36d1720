"""The DuckDB audit store: raw records, derived tables and consumed offsets in one transaction per batch."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

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
    ]
)

# Derived tables are filled by DuckDB from the JSON of the records just inserted (vectorised, no Python
# per row). Records whose id was seen before (a worker re-delivery) are ignored there.
_DERIVE = [
    """
    INSERT OR IGNORE INTO findings
    SELECT record_id, j->>'$.body.kind', CAST(j->'$.body.subjects' AS VARCHAR[]),
           CAST(j->>'$.body.start' AS DOUBLE), CAST(j->>'$.body.end' AS DOUBLE),
           CAST(j->>'$.body.severity' AS DOUBLE), j->'$.body.evidence', j->'$.body.cost',
           j->>'$.source.topic', CAST(j->>'$.source.partition' AS INTEGER), CAST(j->>'$.source.offset' AS BIGINT)
    FROM (SELECT record_id, "partition", "offset", CAST(decode(value) AS JSON) AS j
          FROM batch WHERE record_type = 'finding')
    QUALIFY row_number() OVER (PARTITION BY record_id ORDER BY "partition", "offset") = 1
    """,
    """
    INSERT OR IGNORE INTO dead_letters
    SELECT record_id, j->>'$.body.reason', j->>'$.body.detail', CAST(j->>'$.body.count' AS INTEGER),
           CAST(j->'$.body.indices' AS INTEGER[]), CAST(j->>'$.body.whole_message' AS BOOLEAN),
           j->>'$.source.topic', CAST(j->>'$.source.partition' AS INTEGER), CAST(j->>'$.source.offset' AS BIGINT),
           j->>'$.body.original_sha256', CAST(j->>'$.body.original_bytes' AS BIGINT)
    FROM (SELECT record_id, "partition", "offset", CAST(decode(value) AS JSON) AS j
          FROM batch WHERE record_type = 'dead_letter')
    QUALIFY row_number() OVER (PARTITION BY record_id ORDER BY "partition", "offset") = 1
    """,
    """
    INSERT OR IGNORE INTO decisions
    SELECT j->>'$.body.id', CAST(j->>'$.body.time' AS DOUBLE), j->>'$.body.controller', j->>'$.body.layer',
           j->>'$.body.action', CAST(j->'$.body.targets' AS VARCHAR[]), j->'$.body.parameters', j->>'$.body.reason',
           j->>'$.body.expected_effect.metric', j->>'$.body.expected_effect.direction', j->>'$.body.job',
           j->>'$.source.topic', CAST(j->>'$.source.partition' AS INTEGER), CAST(j->>'$.source.offset' AS BIGINT)
    FROM (SELECT record_id, "partition", "offset", CAST(decode(value) AS JSON) AS j
          FROM batch WHERE record_type = 'decision')
    QUALIFY row_number() OVER (PARTITION BY j->>'$.body.id' ORDER BY "partition", "offset") = 1
    """,
    """
    INSERT OR REPLACE INTO sink_offsets
    SELECT topic, "partition", max("offset") + 1 FROM batch GROUP BY topic, "partition"
    """,
]


def _classify(value: bytes) -> tuple[str, str]:
    """(record_type, record_id) of an audit record; foreign or broken bytes are kept as type 'invalid'."""
    try:
        doc = orjson.loads(value)
        if isinstance(doc, dict) and isinstance(doc.get("type"), str) and isinstance(doc.get("id"), str):
            if doc["type"] in ("finding", "dead_letter", "decision") and not isinstance(doc.get("body"), dict):
                raise ValueError("body missing")
            return doc["type"], doc["id"]
    except ValueError:
        pass
    return "invalid", hashlib.sha256(value).hexdigest()[:32]


class DuckDBStore:
    """Single writer of one DuckDB file. Opening it applies pending migrations."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.con = duckdb.connect(str(path))
        except duckdb.IOException as exc:
            raise StoreError(f"cannot open {path} for writing (is another process using it?): {exc}") from exc
        migrate(self.con)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        rows = self.con.execute('SELECT topic, "partition", next_offset FROM sink_offsets').fetchall()
        return {(t, p): o for t, p, o in rows}

    def write(self, batch: Sequence[RawRecord]) -> None:
        if not batch:
            return
        kinds = [_classify(r.value) for r in batch]
        table = pa.Table.from_arrays(
            [
                pa.array([r.topic for r in batch], pa.string()),
                pa.array([r.partition for r in batch], pa.int32()),
                pa.array([r.offset for r in batch], pa.int64()),
                pa.array([r.timestamp_ms for r in batch], pa.int64()),
                pa.array([r.key for r in batch], pa.binary()),
                pa.array([r.value for r in batch], pa.binary()),
                pa.array([k[0] for k in kinds], pa.string()),
                pa.array([k[1] for k in kinds], pa.string()),
            ],
            schema=_BATCH_SCHEMA,
        )
        con = self.con
        con.register("batch", table)
        try:
            con.execute("BEGIN")
            con.execute(
                'INSERT INTO audit_log (topic, "partition", "offset", kafka_ts_ms, key, value, record_type, record_id)'
                " SELECT * FROM batch"
            )
            for statement in _DERIVE:
                con.execute(statement)
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise StoreError(f"writing {len(batch)} audit records failed, nothing was stored: {exc}") from exc
        finally:
            con.unregister("batch")

    def close(self) -> None:
        self.con.close()
