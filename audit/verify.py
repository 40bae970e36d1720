"""``driftlog verify``: prove the audit trail is what the audit topic delivered, or name the first record,
checkpoint or schema object that is not.

1. Recompute every partition's hash chain from the raw records in ``audit_log`` and compare it with the
   stored ``chain_hash`` of each record (a changed, inserted, deleted or re-ordered record breaks it).
2. Compare the recomputed heads with ``sink_offsets``.
3. Gather the signed checkpoint history from every copy — the file, the optional witness, the checkpoints
   topic (outside this host), the ``checkpoints`` table — and check it against a pinned key
   (audit/verify_anchors.py). The chain recomputed from the database must reach every checkpointed head
   (nothing covered was dropped), and the newest checkpoint must cover the stored heads (nothing was
   appended after it); an empty history fails.
4. Classify every raw record again (type and id, audit/classify.py as the store does) and compare with
   what is stored; and check that every schema object (views, macros, functions, triggers, ...) is the
   migrations' own (audit/verify_catalog.py).

The file is attached read-only to an in-memory database, so nothing defined in it stands in for what
verify calls. Steps 1 and 4 run per offset range in parallel processes (audit/verify_rows.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from audit.verify_anchors import Anchors, History, gather
from audit.verify_catalog import STORE, check_catalog
from audit.verify_rows import PARALLEL_ROWS, RANGE_ROWS, Range, RangeResult, open_store, plan, run_ranges
from streams.errors import StoreError

Heads = dict[tuple[str, int], tuple[int, bytes]]


@dataclass
class Report:
    records: int = 0
    partitions: int = 0
    checkpoints: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
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
    anchors: Anchors | None = None,
) -> Report:
    """Check everything (see the module's docstring). ``public_key`` is the key beside the private one;
    ``anchors`` pins the key and names the copies outside this host (without them only this host's copies
    are compared, which a host owner could rewrite together). ``range_rows`` and ``parallel_rows`` tune how
    the per-row checks are split and from how many rows on they use worker processes."""
    if not db_path.exists():
        raise StoreError(f"no audit store at {db_path}")
    con = open_store(db_path)
    report = Report()
    started = time.perf_counter()
    try:
        history = gather(con, f"{STORE}.checkpoints", checkpoint_file, public_key, anchors)
        report.problems += history.problems
        report.notes += history.notes
        report.checkpoints = len(history.checkpoints)
        wanted = {(t, p, n - 1) for c in history.checkpoints for (t, p), (n, _) in c.heads.items()}
        ranges = plan(con, wanted, range_rows)
        results = run_ranges(db_path, con, ranges, parallel_rows)
        heads: Heads = {}
        at_checkpoints: dict[tuple[str, int, int], bytes] = {}
        for r, result in zip(ranges, results, strict=True):
            tp = (r.topic, r.partition)
            if result.head is not None:
                heads[tp] = result.head
            at_checkpoints.update(((*tp, o), h) for o, h in result.found.items())
            report.records += result.records
        report.partitions = len(heads)
        _name_first_mismatches(ranges, results, report)
        report.problems += check_catalog(con)
        _check_offsets(con, heads, report)
        _check_checkpointed_heads(history, at_checkpoints, report)
        _check_covered(history, heads, report)
    finally:
        con.close()
    report.seconds = time.perf_counter() - started
    return report


def _check_checkpointed_heads(
    history: History, at_checkpoints: dict[tuple[str, int, int], bytes], report: Report
) -> None:
    """The chain recomputed from the database reaches every signed head at its offset."""
    for c in history.checkpoints:
        for (t, p), (n, head) in sorted(c.heads.items()):
            found = at_checkpoints.get((t, p, n - 1))
            if found is None:
                report.problems.append(
                    f"checkpoint {c.seq}: {t}/{p} offset {n - 1} is signed but missing from audit_log (truncated)"
                )
            elif found != head:
                report.problems.append(f"checkpoint {c.seq}: chain head at {t}/{p}@{n - 1} differs from the signed one")


def _check_covered(history: History, heads: Heads, report: Report) -> None:
    """The newest checkpoint covers every stored record: name the tail after it, per partition."""
    newest = history.newest
    if newest is None:
        return
    for (t, p), (n, _) in sorted(heads.items()):
        signed = newest.heads.get((t, p), (0, b""))[0]
        if n > signed:
            report.problems.append(
                f"audit_log records {t}/{p}@{signed}..{n - 1} come after the newest signed checkpoint "
                f"({newest.seq}): appended after it, or the sink stopped without its final checkpoint "
                "(start it again and stop it with SIGTERM)"
            )


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
        report.problems.append(
            f"audit_log record {r.topic}/{r.partition}@{offset}: stored type or id differ from its bytes"
        )


def _check_offsets(con: duckdb.DuckDBPyConnection, heads: Heads, report: Report) -> None:
    stored = {
        (t, p): (n, bytes(h))
        for t, p, n, h in con.execute(
            f'SELECT topic, "partition", next_offset, chain_head FROM {STORE}.sink_offsets'
        ).fetchall()
    }
    for tp in sorted(set(stored) | set(heads)):
        if stored.get(tp) != heads.get(tp):
            report.problems.append(
                f"sink_offsets for {tp[0]}/{tp[1]} do not match audit_log (stored next offset "
                f"{stored.get(tp, (None,))[0]}, records end at {heads.get(tp, (None,))[0]})"
            )
