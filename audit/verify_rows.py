"""The per-row half of ``driftlog verify``: recompute the hash chain (natively where built) and the type and id (DuckDB,
audit/classify.py) of every record in ``audit_log``, split into offset ranges that run in parallel
processes.

A range of one partition starts from the *stored* chain hash of the record before it. While no record
before a range fails, that stored hash is the recomputed one, so the first mismatch over all ranges (in
partition and offset order) is exactly the one a single pass from the genesis hash finds, and so are the
heads when nothing fails.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from audit.chain import LINK, chain_arrow, genesis
from audit.classify import classify_sql
from audit.diagnose import open_failure
from audit.verify_catalog import STORE
from streams.errors import StoreError

AUDIT_LOG = f"{STORE}.audit_log"
RANGE_ROWS = 65_536  # rows per range: small enough to share work, large enough to amortise a query
PARALLEL_ROWS = 200_000  # fewer rows are checked in this process: starting a worker costs ~0.5 s


@dataclass(frozen=True)
class Range:
    """Rows of one partition with offsets in (after, last]; ``prev`` is the stored chain hash at ``after``
    (the genesis hash when the range starts the partition, ``after`` then -1)."""

    topic: str
    partition: int
    after: int
    last: int
    prev: bytes
    rows: int
    wanted: frozenset[int]  # offsets whose recomputed hash a signed checkpoint names


@dataclass
class RangeResult:
    records: int = 0
    chain_mismatch: int | None = None  # offset of the first record whose chain hash differs
    class_mismatch: int | None = None  # offset of the first record whose stored type or id differs
    head: tuple[int, bytes] | None = None  # (next offset, recomputed hash of the last record)
    found: dict[int, bytes] = field(default_factory=dict)  # wanted offset -> recomputed hash


def plan(con: duckdb.DuckDBPyConnection, wanted: set[tuple[str, int, int]], rows: int = RANGE_ROWS) -> list[Range]:
    """Cut every partition into ranges of ``rows`` records (one window query over offsets and hashes)."""
    bounds = con.execute(
        'SELECT topic, "partition", "offset", chain_hash, i FROM ('
        ' SELECT topic, "partition", "offset", chain_hash, count(*) OVER w AS n,'
        f'  row_number() OVER (w ORDER BY "offset") AS i FROM {AUDIT_LOG}'
        ' WINDOW w AS (PARTITION BY topic, "partition"))'
        ' WHERE i % $rows = 0 OR i = n ORDER BY topic, "partition", "offset"',
        {"rows": rows},
    ).fetchall()
    ranges: list[Range] = []
    current: tuple[str, int] | None = None
    after, prev, done = -1, b"", 0
    for topic, partition, offset, chain_hash, i in bounds:
        if (topic, partition) != current:
            current, after, prev, done = (topic, partition), -1, genesis(topic, partition), 0
        mine = frozenset(o for t, p, o in wanted if (t, p) == current and after < o <= offset)
        ranges.append(Range(topic, partition, after, offset, prev, i - done, mine))
        after, prev, done = offset, bytes(chain_hash), i
    return ranges


_connections: dict[str, duckdb.DuckDBPyConnection] = {}


def open_store(db_path: Path | str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the store attached read-only as ``store``: what verify calls resolves to
    built-ins, never to macros defined in the file; no file or network access after the attachment."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{str(db_path).replace(chr(39), chr(39) * 2)}' AS {STORE} (READ_ONLY)")
    except duckdb.Error as exc:
        con.close()
        why = open_failure(Path(db_path), exc, read_only=True)
        if "another process holds it" in why:
            why = f"{db_path} is held by a writer; stop the sink (SIGTERM) and verify again: {exc}"
        raise StoreError(why) from exc
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def check_range(db_path: str, r: Range) -> RangeResult:
    """Recompute one range (in a worker process: its own read-only connection, kept for the next range)."""
    con = _connections.get(db_path)
    if con is None:
        con = _connections[db_path] = open_store(db_path)
    return _check(con.cursor(), r)


def _check(con: duckdb.DuckDBPyConnection, r: Range) -> RangeResult:
    rows = (
        'SELECT "offset", kafka_ts_ms, key, value, chain_hash, record_type AS stored_type, record_id AS stored_id'
        f' FROM {AUDIT_LOG} WHERE topic = $topic AND "partition" = $partition AND "offset" > $after'
        ' AND "offset" <= $last'
    )
    reader = con.sql(
        'SELECT "offset", kafka_ts_ms, key, value, chain_hash,'
        " stored_type IS NOT DISTINCT FROM record_type AND stored_id IS NOT DISTINCT FROM record_id AS same"
        f' FROM ({classify_sql(f"({rows})")}) ORDER BY "offset"',
        params={"topic": r.topic, "partition": r.partition, "after": r.after, "last": r.last},
    ).to_arrow_reader(RANGE_ROWS)
    result, prev, topic = RangeResult(), r.prev, r.topic.encode()
    for chunk in reader:
        offsets, stored = chunk.column(0), chunk.column(4)
        links = chain_arrow(prev, topic, r.partition, *chunk.columns[:4])
        if result.chain_mismatch is None and not _same_links(stored, links):
            result.chain_mismatch = next(
                o for i, (o, h) in enumerate(zip(offsets.to_pylist(), stored.to_pylist(), strict=True))
                if h != links[i * LINK : (i + 1) * LINK]
            )  # fmt: skip
        same = chunk.column(5)
        if result.class_mismatch is None and not pc.all(same).as_py():
            result.class_mismatch = offsets[pc.index(same, False).as_py()].as_py()
        if r.wanted:
            result.found.update(
                (o, links[i * LINK : (i + 1) * LINK]) for i, o in enumerate(offsets.to_pylist()) if o in r.wanted
            )
        result.records += len(offsets)
        prev = links[-LINK:]
        result.head = (offsets[-1].as_py() + 1, prev)
    return result


def _same_links(stored: pa.Array, links: bytes) -> bool:
    """Whether a column of stored chain hashes is ``links`` (32 bytes each, back to back)."""
    try:
        fixed = stored.cast(pa.binary(LINK))
    except pa.ArrowInvalid:  # a stored hash that is not 32 bytes long
        return False
    data = memoryview(fixed.buffers()[1]).cast("B")[fixed.offset * LINK : (fixed.offset + len(fixed)) * LINK]
    return fixed.null_count == 0 and data == links


def run_ranges(
    db_path: Path, con: duckdb.DuckDBPyConnection, ranges: Sequence[Range], parallel_rows: int = PARALLEL_ROWS
) -> list[RangeResult]:
    """Check every range, on every core: worker processes take ranges from the front while this process
    takes them from the back (so it does useful work while the workers start)."""
    workers = min((os.cpu_count() or 1) - 1, len(ranges) - 1)
    if workers < 1 or sum(r.rows for r in ranges) < parallel_rows:
        return [_check(con.cursor(), r) for r in ranges]
    # spawn: this process may run DuckDB threads, which a forked child must not inherit mid-lock
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures: list[Future[RangeResult]] = [pool.submit(check_range, str(db_path), r) for r in ranges]
        local: dict[int, RangeResult] = {}
        for i in reversed(range(len(ranges))):
            if not futures[i].cancel():
                break  # a worker has it, and everything before it
            local[i] = _check(con.cursor(), ranges[i])
        return [local[i] if i in local else futures[i].result() for i in range(len(ranges))]
    finally:
        pool.shutdown(cancel_futures=True)
