"""driftlog from Python (a notebook): open an audit DuckDB file and get its findings, ranked causes,
decisions and roll-ups as Arrow tables (``.to_pandas()`` for pandas), or analyse telemetry into one.

    from audit.api import AuditDB, analyze

    db = AuditDB("driftlog-demo.duckdb")
    findings = db.findings().to_pandas()
    causes = db.causes(findings.id[0]).to_pandas()
    db = analyze(["traces/rank0.pt.trace.json.gz", ...], "traces.duckdb")   # profiler traces, one per rank

Every read is the same read-only query path as ``driftlog query`` (through the sink's SQL endpoint when a
running sink holds the file and ``endpoint`` is given); the named queries are ``sql/queries/*.sql``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from audit.queries import library, named
from audit.query import Endpoint, fetch_arrow
from audit.sql_run import Limits


class AuditDB:
    """Read-only view of one audit store."""

    def __init__(self, path: Path | str, endpoint: Endpoint | str | None = None, max_rows: int = 1_000_000) -> None:
        self.path = Path(path)
        self.endpoint = Endpoint(endpoint) if isinstance(endpoint, str) else endpoint
        self.max_rows = max_rows

    def sql(self, text: str, params: dict[str, Any] | None = None) -> pa.Table:
        """Any read-only SELECT over the audit views, as an Arrow table."""
        limits = Limits(self.max_rows, 300.0)
        return fetch_arrow(self.path, text, params, limits=limits, endpoint=self.endpoint)

    def query(self, name: str, **params: Any) -> pa.Table:
        """A named query (``queries()`` lists them) with its parameters as keyword arguments."""
        q = named(name)
        return self.sql(q.sql, q.bind({k: str(v) for k, v in params.items()}))

    @staticmethod
    def queries() -> dict[str, str]:
        """Named query -> the question it answers."""
        return {name: q.answers for name, q in sorted(library().items())}

    def jobs(self) -> list[str]:
        rows = self.sql("SELECT DISTINCT job FROM metrics_rollup WHERE job <> '' ORDER BY job").column(0)
        return [str(j) for j in rows.to_pylist()]

    def findings(self, kind: str | None = None, start: float | None = None, end: float | None = None) -> pa.Table:
        """Findings (worst first), optionally of one kind and beginning in [start, end)."""
        return self.sql(
            "SELECT id, kind, subjects, start_time, end_time, severity, CAST(cost->>'accel_s' AS DOUBLE) AS "
            "cost_accel_s, evidence, cost FROM findings WHERE ($kind IS NULL OR kind = $kind) AND "
            "start_time >= coalesce($start, '-inf'::DOUBLE) AND start_time < coalesce($end, 'inf'::DOUBLE) "
            "ORDER BY severity DESC, start_time, id",
            {"kind": kind, "start": start, "end": end},
        )

    def causes(self, finding_id: str | None = None) -> pa.Table:
        """Ranked causes of one finding (named query ``finding_causes``), or of every finding."""
        if finding_id is not None:
            return self.query("finding_causes", finding_id=finding_id)
        return self.sql(
            "SELECT f.kind AS finding_kind, a.finding_id, a.rank, a.cause_kind, a.cause, a.share, a.slowdown, "
            "a.cost_accel_s FROM attributions AS a JOIN findings AS f ON f.id = a.finding_id "
            "ORDER BY f.start_time, a.finding_id, a.rank"
        )

    def decisions(self) -> pa.Table:
        return self.sql(
            "SELECT id, time, controller, layer, action, targets, reason, expected_metric, expected_direction, job "
            "FROM decisions ORDER BY time, id"
        )

    def rollups(self, job: str | None = None, name: str | None = None) -> pa.Table:
        """Windowed roll-ups (step_s, accel_s_per_output, wasted_accel_s by cause, energy, ...)."""
        return self.sql(
            "SELECT job, entity, name, window_start, window_end, n, mean, p50, p99, min, max, total "
            "FROM metrics_rollup WHERE ($job IS NULL OR job = $job) AND ($name IS NULL OR name = $name) "
            "ORDER BY job, name, entity, window_start",
            {"job": job, "name": name},
        )

    def wasted_by_cause(self, job: str = "%") -> pa.Table:
        return self.query("wasted_by_cause", job=job)


def write_records(records: Iterable[Any], db: Path | str) -> None:
    """Append audit records (``audit.records.AuditRecord``) to a DuckDB audit store, as the sink would from
    the audit topic (partition 0, offsets in order)."""
    from audit.duckdb_store import DuckDBStore
    from audit.store import RawRecord

    store = DuckDBStore(Path(db))
    try:
        start = store.next_offsets().get(("audit", 0), 0)
        raws = [RawRecord("audit", 0, start + i, 0, r.key.encode(), r.encode()) for i, r in enumerate(records)]
        for i in range(0, len(raws), 100_000):
            store.write(raws[i : i + 100_000])
    finally:
        store.close()


def analyze(paths: Iterable[Path | str], db: Path | str, job: str | None = None) -> AuditDB:
    """Run the engine over files — PyTorch profiler traces (one per rank), JSONL or Parquet as ``driftlog
    analyze`` reads them — and store what it found in ``db``."""
    from streams.analyze import analyze_files

    out = analyze_files([Path(p) for p in paths], job=job)
    write_records(out.audit, db)
    return AuditDB(db)
