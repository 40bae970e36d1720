"""``driftlog verify``: prove the audit trail is what the audit topic delivered, or name the first record
that is not.

1. Recompute every partition's hash chain from the raw records in ``audit_log`` and compare it with the
   stored ``chain_hash`` of each record (a changed, inserted, deleted or re-ordered record breaks it).
2. Compare the recomputed heads with ``sink_offsets``.
3. Check every signed checkpoint (file kept outside the DuckDB file): the signature, and that the chain
   recomputed from the database reaches each checkpointed head at its offset (nothing covered was dropped).
4. Classify every raw record again (type and id) and compare with what is stored; and check that the views
   that present the records (findings, decisions, ...) are the ones the migrations define.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from audit.chain import genesis, link_parts
from audit.checkpoint import Checkpoint, load_public_key, read_checkpoints
from audit.duckdb_store import classify
from audit.migrations import migrate
from audit.query import READ_ONLY_CONFIG
from streams.errors import StoreError


@dataclass
class Report:
    records: int = 0
    partitions: int = 0
    checkpoints: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def verify(db_path: Path, checkpoint_file: Path | None, public_key: Path | None, batch: int = 200_000) -> Report:
    if not db_path.exists():
        raise StoreError(f"no audit store at {db_path}")
    try:
        con = duckdb.connect(str(db_path), read_only=True, config=READ_ONLY_CONFIG)
    except duckdb.IOException as exc:
        raise StoreError(f"{db_path} is held by a writer; stop the sink (SIGTERM) and verify again: {exc}") from exc
    report = Report()
    started = time.perf_counter()
    try:
        at_checkpoints: dict[tuple[str, int, int], bytes] = {}
        checkpoints: list[Checkpoint] = []
        if checkpoint_file is not None and public_key is not None:
            checkpoints, problems = read_checkpoints(checkpoint_file, load_public_key(public_key))
            report.problems += problems
            report.checkpoints = len(checkpoints)
        wanted = {(t, p, n - 1) for c in checkpoints for (t, p), (n, _) in c.heads.items()}
        # DuckDB re-classifies (no GIL) while Python recomputes the chains
        derived = threading.Thread(target=_check_classes, args=(con.cursor(), report), name="verify-classes")
        derived.start()
        try:
            heads = _check_chains(con, report, wanted, at_checkpoints, batch)
        finally:
            derived.join()
        _check_offsets(con, heads, report)
        for c in checkpoints:
            for (t, p), (n, head) in sorted(c.heads.items()):
                found = at_checkpoints.get((t, p, n - 1))
                if found is None:
                    report.problems.append(
                        f"checkpoint {c.seq}: {t}/{p} offset {n - 1} is signed but missing from audit_log (truncated)"
                    )
                elif found != head:
                    report.problems.append(
                        f"checkpoint {c.seq}: chain head at {t}/{p}@{n - 1} differs from the signed one"
                    )
    finally:
        con.close()
    report.seconds = time.perf_counter() - started
    return report


def _check_chains(
    con: duckdb.DuckDBPyConnection,
    report: Report,
    wanted: set[tuple[str, int, int]],
    found: dict[tuple[str, int, int], bytes],
    batch: int,
) -> dict[tuple[str, int], tuple[int, bytes]]:
    reader = con.sql(
        'SELECT topic, "partition", "offset", kafka_ts_ms, key, value, chain_hash FROM audit_log'
        ' ORDER BY topic, "partition", "offset"'
    ).to_arrow_reader(batch)
    assert reader is not None
    heads: dict[tuple[str, int], tuple[int, bytes]] = {}
    first_bad: str | None = None
    current: tuple[str, int] | None = None
    prev, topic_bytes = b"", b""
    for chunk in reader:
        cols = chunk.to_pydict()
        for topic, partition, offset, ts, key, value, stored in zip(
            cols["topic"], cols["partition"], cols["offset"], cols["kafka_ts_ms"], cols["key"], cols["value"],
            cols["chain_hash"], strict=True,
        ):  # fmt: skip
            if (topic, partition) != current:
                current, prev, topic_bytes = (topic, partition), genesis(topic, partition), topic.encode()
            prev = link_parts(prev, topic_bytes, partition, offset, ts, key, value)
            if prev != stored and first_bad is None:
                first_bad = f"{topic}/{partition}@{offset}"
                report.problems.append(
                    f"audit_log record {first_bad} does not match its hash chain: it or a record before it in "
                    "that partition was changed, inserted or deleted"
                )
            if (topic, partition, offset) in wanted:
                found[(topic, partition, offset)] = prev
            heads[(topic, partition)] = (offset + 1, prev)
        report.records += chunk.num_rows
    report.partitions = len(heads)
    return heads


def _check_offsets(
    con: duckdb.DuckDBPyConnection, heads: dict[tuple[str, int], tuple[int, bytes]], report: Report
) -> None:
    stored = {
        (t, p): (n, bytes(h))
        for t, p, n, h in con.execute('SELECT topic, "partition", next_offset, chain_head FROM sink_offsets').fetchall()
    }
    for tp in sorted(set(stored) | set(heads)):
        if stored.get(tp) != heads.get(tp):
            report.problems.append(
                f"sink_offsets for {tp[0]}/{tp[1]} do not match audit_log (stored next offset "
                f"{stored.get(tp, (None,))[0]}, records end at {heads.get(tp, (None,))[0]})"
            )


def _check_classes(con: duckdb.DuckDBPyConnection, report: Report) -> None:
    """Every record's stored type and id are those its bytes give; the views are the migrations' own."""
    columns = 'topic, "partition", "offset", record_type, record_id'
    row = con.execute(
        f'SELECT "partition", "offset" FROM ((SELECT {columns} FROM ({classify("audit_log")}))'
        f" EXCEPT ALL (SELECT {columns} FROM audit_log)) LIMIT 1"
    ).fetchone()
    if row is not None:
        report.problems.append(f"audit_log record {row[0]}@{row[1]}: stored type or id differ from its bytes")
    fresh = duckdb.connect()
    migrate(fresh)
    views = "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
    expected, stored = dict(fresh.execute(views).fetchall()), dict(con.execute(views).fetchall())
    for name in sorted(set(expected) | set(stored)):
        if expected.get(name) != stored.get(name):
            report.problems.append(f"view {name} is not the one the migrations define (altered, added or dropped)")
