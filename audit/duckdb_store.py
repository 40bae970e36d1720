"""The DuckDB audit store: raw records, their hash chain and the consumed offsets, one transaction per batch."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import lt
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from audit.chain import LINK, chain_arrow, genesis
from audit.classify import Classifier
from audit.diagnose import open_failure
from audit.migrations import migrate
from audit.store import RawRecord, Run, runs
from streams.errors import StoreError

_COLUMNS = 'topic, "partition", "offset", kafka_ts_ms, key, value, record_type, record_id, chain_hash'
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


ROW_GROUP = 122_880  # DuckDB's rows per row group: a transaction this large bypasses the WAL
_T = TypeVar("_T")


def _fresh(run: Run, next_offset: int) -> Run:
    """The records of ``run`` not stored yet: offsets from ``next_offset`` on, each above the last."""
    offsets = run.offsets
    if offsets and offsets[0] >= next_offset and all(map(lt, offsets, offsets[1:])):
        return run  # the usual case: a Kafka fetch, nothing re-delivered
    keep = []
    for i, offset in enumerate(offsets):
        if offset >= next_offset:
            keep.append(i)
            next_offset = offset + 1

    def pick(column: Sequence[_T]) -> list[_T]:
        return [column[i] for i in keep]

    return Run(run.topic, run.partition, pick(run.offsets), pick(run.timestamps), pick(run.keys), pick(run.values))


_INSERTS = [
    f"INSERT INTO audit_log ({_COLUMNS}) SELECT {_COLUMNS} FROM batch",
    "INSERT OR REPLACE INTO sink_offsets SELECT * FROM new_offsets",
]


@dataclass(frozen=True)
class Prepared:
    """A batch ready to commit: its rows, the partitions it touches, and every partition's next offset and
    chain head after it."""

    table: pa.Table
    touched: frozenset[tuple[str, int]]
    heads: dict[tuple[str, int], bytes]
    nexts: dict[tuple[str, int], int]


class DuckDBStore:
    """Single writer of one DuckDB file and the only write path into it. Opening applies pending
    migrations. File and network access through SQL are disabled on its connection.

    Column data is compressed with zstd (``force_compression``): on ~300-byte JSON values it gives a
    smaller file than DuckDB's default choice and costs about half the CPU per row
    (bench/bench_duckdb_ceiling.py). A transaction of at least :data:`ROW_GROUP` rows is written straight
    to the data file instead of the WAL, so a sink that batches that many writes each row once.

    DuckDB runs on one thread here: the sink's other core prepares the next batch meanwhile. With two
    threads beside that preparing thread, four 122,880-row transactions became 6-7 partly filled row groups
    that the closing checkpoint rewrote (0.3-0.5 s, against 0.02 s). Queries served through this
    connection's cursors (the sink's SQL endpoint) run on that one thread too."""

    def __init__(self, path: Path, classifier: Classifier | None = None) -> None:
        self.path = path
        try:
            self.con = duckdb.connect(str(path), config={"enable_external_access": False})
        except duckdb.Error as exc:
            raise StoreError(open_failure(path, exc)) from exc
        migrate(self.con)
        self.con.execute("SET wal_autocheckpoint = '256MB'")
        self.con.execute("SET force_compression = 'zstd'")
        self.con.execute("SET threads = 1")  # see the class docstring
        self.con.execute("SET lock_configuration = true")
        rows = self.con.execute('SELECT topic, "partition", next_offset, chain_head FROM sink_offsets').fetchall()
        self._next = {(t, p): o for t, p, o, _ in rows}
        self._heads = {(t, p): bytes(h) for t, p, _, h in rows}
        self._pending_next, self._pending_heads = dict(self._next), dict(self._heads)  # as prepared
        self._aux = self.con.cursor()
        self._classifier = classifier or Classifier()

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    def write(self, batch: Sequence[RawRecord]) -> None:
        """Append the records not yet stored (offsets below the stored next offset are re-deliveries and
        are skipped), their chain hashes and the new offsets, in one transaction."""
        prepared = self.prepare(runs(batch))
        if prepared is not None:
            self.commit([prepared])

    def prepare(self, batch: Sequence[Run]) -> Prepared | None:
        """The CPU half of :meth:`write` (skip re-deliveries, hash, classify, build Arrow), so that a
        caller can prepare the next batches while :meth:`commit` of earlier ones runs in DuckDB. Batches
        must be committed in the order they were prepared."""
        heads, nexts = dict(self._pending_heads), dict(self._pending_next)
        fresh: list[Run] = []
        for given in batch:
            run = _fresh(given, nexts.get((given.topic, given.partition), -1))
            if run.offsets:
                fresh.append(run)
                nexts[run.topic, run.partition] = run.offsets[-1] + 1
        if not fresh:
            return None
        offsets, stamps, keys, values = (
            pa.array(list(chain.from_iterable(getattr(run, name) for run in fresh)), kind)
            for name, kind in (("offsets", pa.int64()), ("timestamps", pa.int64()), ("keys", pa.binary()),
                               ("values", pa.binary()))
        )  # fmt: skip
        links, start = [], 0
        for run in fresh:  # each partition's chain, natively over the Arrow buffers when built
            tp, n = (run.topic, run.partition), len(run.offsets)
            window = (column.slice(start, n) for column in (offsets, stamps, keys, values))
            links.append(chain_arrow(heads.get(tp) or genesis(*tp), run.topic.encode(), run.partition, *window))
            heads[tp], start = links[-1][-LINK:], start + n
        n = len(offsets)
        arrays = [
            pa.concat_arrays([pa.repeat(pa.scalar(run.topic, pa.string()), len(run.offsets)) for run in fresh]),
            pa.concat_arrays([pa.repeat(pa.scalar(run.partition, pa.int32()), len(run.offsets)) for run in fresh]),
            offsets,
            stamps,
            keys,
            values,
            *self._classifier.classify(values),  # type and id (audit/classify.py; verify derives them again)
            pa.FixedSizeBinaryArray.from_buffers(pa.binary(LINK), n, [None, pa.py_buffer(b"".join(links))]),
        ]
        touched = frozenset(tp for tp, n in nexts.items() if self._pending_next.get(tp) != n)
        self._pending_heads, self._pending_next = heads, nexts
        return Prepared(pa.Table.from_arrays(arrays, schema=_BATCH_SCHEMA), touched, heads, nexts)

    def commit(self, prepared: Sequence[Prepared]) -> None:
        """Store prepared batches (in the order they were prepared) in one transaction; on failure nothing
        of them is stored and the store forgets every batch prepared after the last commit."""
        if not prepared:
            return
        last = prepared[-1]
        touched = sorted(set().union(*(p.touched for p in prepared)))
        offsets = pa.Table.from_arrays(
            [
                pa.array([t for t, _ in touched], pa.string()),
                pa.array([p for _, p in touched], pa.int32()),
                pa.array([last.nexts[tp] for tp in touched], pa.int64()),
                pa.array([last.heads[tp] for tp in touched], pa.binary(32)),
            ],
            schema=_HEADS_SCHEMA,
        )
        try:
            self._commit(pa.concat_tables([p.table for p in prepared]), offsets)
        except StoreError:
            self._pending_heads, self._pending_next = dict(self._heads), dict(self._next)
            raise
        self._heads, self._next = last.heads, last.nexts

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
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT has ended the transaction already:
                con.execute("ROLLBACK")  # its "no transaction is active" must not hide the real error
            raise StoreError(f"writing {table.num_rows} audit records failed, nothing was stored: {exc}") from exc
        finally:
            con.unregister("batch")
            con.unregister("new_offsets")

    def add_checkpoint(self, seq: int, line: dict[str, str]) -> None:
        """Record a signed checkpoint (already written to the checkpoint file and topic). Its own connection:
        a batch may be committing on the main one meanwhile."""
        try:
            self._aux.execute(
                "INSERT INTO checkpoints SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM checkpoints WHERE seq = ?)",
                [seq, line["payload"], line["signature"], line["key_id"], seq],
            )
        except duckdb.Error as exc:
            raise StoreError(f"recording checkpoint {seq} in {self.path} failed: {exc}") from exc

    def heads(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        """Per partition: (next offset, chain head) as committed."""
        return {tp: (self._next[tp], self._heads[tp]) for tp in self._heads}

    def last_records(self) -> dict[tuple[str, int], RawRecord]:
        """Per partition, the last record stored (once per start: the sink compares it with the topic)."""
        rows = self._aux.execute(
            'SELECT a.topic, a."partition", a."offset", a.kafka_ts_ms, a.key, a.value FROM audit_log a '
            'JOIN sink_offsets s ON a.topic = s.topic AND a."partition" = s."partition" '
            'AND a."offset" = s.next_offset - 1'
        ).fetchall()
        return {(t, p): RawRecord(t, p, o, ts, k, bytes(v)) for t, p, o, ts, k, v in rows}

    def close(self) -> None:
        self._classifier.close()
        self._aux.close()
        self.con.close()
