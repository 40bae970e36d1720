"""``driftlog verify``: prove the audit trail is what the audit topic delivered, or name the first record
that is not.

1. Recompute every partition's hash chain from the raw records in ``audit_log`` and compare it with the
   stored ``chain_hash`` of each record (a changed, inserted, deleted or re-ordered record breaks it).
2. Compare the recomputed heads with ``sink_offsets``.
3. Check every signed checkpoint (file kept outside the DuckDB file): the signature, and that the chain
   recomputed from the database reaches each checkpointed head at its offset (nothing covered was dropped).
4. Classify every raw record again (type and id, audit/classify.py as the store does) and compare with
   what is stored; and check that the views that present the records (findings, decisions, ...) are the
   ones the migrations define.

Steps 1 and 4 run per offset range in parallel processes (audit/verify_rows.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from audit.checkpoint import Checkpoint, load_public_keys, read_checkpoints
from audit.diagnose import open_failure
from audit.migrations import migrate
from audit.query import READ_ONLY_CONFIG
from audit.verify_rows import PARALLEL_ROWS, RANGE_ROWS, Range, RangeResult, plan, run_ranges
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


def verify(
    db_path: Path,
    checkpoint_file: Path | None,
    public_key: Path | None,
    range_rows: int = RANGE_ROWS,
    parallel_rows: int = PARALLEL_ROWS,
) -> Report:
    """Check everything (see the module's docstring); ``range_rows`` and ``parallel_rows`` tune how the
    per-row checks are split and from how many rows on they use worker processes."""
    if not db_path.exists():
        raise StoreError(f"no audit store at {db_path}")
    try:
        con = duckdb.connect(str(db_path), read_only=True, config=READ_ONLY_CONFIG)
    except duckdb.Error as exc:
        why = open_failure(db_path, exc, read_only=True)
        if "another process holds it" in why:
            why = f"{db_path} is held by a writer; stop the sink (SIGTERM) and verify again: {exc}"
        raise StoreError(why) from exc
    report = Report()
    started = time.perf_counter()
    try:
        checkpoints: list[Checkpoint] = []
        if checkpoint_file is not None and public_key is not None:
            checkpoints, problems = read_checkpoints(checkpoint_file, load_public_keys(public_key))
            report.problems += problems
            report.checkpoints = len(checkpoints)
        wanted = {(t, p, n - 1) for c in checkpoints for (t, p), (n, _) in c.heads.items()}
        ranges = plan(con, wanted, range_rows)
        results = run_ranges(db_path, con, ranges, parallel_rows)
        heads: dict[tuple[str, int], tuple[int, bytes]] = {}
        at_checkpoints: dict[tuple[str, int, int], bytes] = {}
        for r, result in zip(ranges, results, strict=True):
            tp = (r.topic, r.partition)
            if result.head is not None:
                heads[tp] = result.head
            at_checkpoints.update(((*tp, o), h) for o, h in result.found.items())
            report.records += result.records
        report.partitions = len(heads)
        _name_first_mismatches(ranges, results, report)
        _check_views(con, report)
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


def _name_first_mismatches(ranges: list[Range], results: list[RangeResult], report: Report) -> None:
    """The first record (in partition and offset order) that breaks its chain, and the first whose stored
    type or id differ from its bytes."""
    chain = [(r, x.chain_mismatch) for r, x in zip(ranges, results, strict=True) if x.chain_mismatch is not None]
    if chain:
        r, offset = chain[0]
        report.problems.append(
            f"audit_log record {r.topic}/{r.partition}@{offset} does not match its hash chain: it or a record "
            "before it in that partition was changed, inserted or deleted"
        )
    classes = [(r, x.class_mismatch) for r, x in zip(ranges, results, strict=True) if x.class_mismatch is not None]
    if classes:
        r, offset = classes[0]
        report.problems.append(f"audit_log record {r.partition}@{offset}: stored type or id differ from its bytes")


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


def _check_views(con: duckdb.DuckDBPyConnection, report: Report) -> None:
    """The views that present the records are the migrations' own."""
    fresh = duckdb.connect()
    migrate(fresh)
    views = "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
    expected, stored = dict(fresh.execute(views).fetchall()), dict(con.execute(views).fetchall())
    for name in sorted(set(expected) | set(stored)):
        if expected.get(name) != stored.get(name):
            report.problems.append(f"view {name} is not the one the migrations define (altered, added or dropped)")
