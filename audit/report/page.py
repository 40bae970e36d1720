"""``driftlog report``: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched) that
an on-call engineer or a training lead reads; under every figure, the named queries that reproduce it.
The same audit store and options give the same bytes (no wall-clock time in the page)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from audit.api import AuditDB
from audit.queries import named
from audit.query import Endpoint
from audit.report.figures import FIGURES, Figure, Scope
from audit.report.svg import clock
from streams.errors import QueryError

CSS = """
body { font-family: sans-serif; margin: 24px auto; max-width: 940px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin: 28px 0 4px; }
.meta, .caption, .note, .empty { color: #555; font-size: 13px; } .empty { font-style: italic; }
section.figure { border-top: 1px solid #ddd; padding-top: 4px; }
table { border-collapse: collapse; font-size: 12px; width: 100%; }
th, td { border-bottom: 1px solid #e5e5e5; padding: 3px 6px; text-align: left; }
details { font-size: 12px; margin-top: 6px; } pre { background: #f6f6f6; padding: 6px; overflow-x: auto; }
code { font-size: 12px; }
"""


@dataclass(frozen=True)
class Rendered:
    path: Path
    job: str
    size_bytes: int
    seconds: float
    figures: tuple[Figure, ...]


JOBS = """
SELECT job, sum(n) AS n FROM (
    SELECT job, count(*) AS n FROM metrics_rollup WHERE job <> '' GROUP BY job
    UNION ALL SELECT job, 0 FROM graph_snapshots WHERE job <> '' GROUP BY job
) GROUP BY job ORDER BY n DESC, job
"""
EXTENT = """
SELECT min(t0) AS t0, max(t1) AS t1 FROM (
    SELECT window_start AS t0, window_end AS t1 FROM metrics_rollup WHERE job = $job
    UNION ALL SELECT valid_from, valid_from FROM graph_snapshots WHERE job = $job
    UNION ALL SELECT start_time, end_time FROM findings
    WHERE len(list_filter(subjects, lambda s: s = 'job:' || $job OR contains(s, ':' || $job || '/'))) > 0
)
"""


def pick_job(db: AuditDB, job: str | None) -> str:
    """``job`` when the store knows it; by default the job with the most roll-ups (or any with a graph)."""
    names = [str(j) for j in db.sql(JOBS).column("job").to_pylist()]
    if not names:
        raise QueryError(f"{db.path} holds no job yet: run the worker and sink (or analyze) first")
    if job is None:
        return names[0]
    if job not in names:
        raise QueryError(f"no job {job!r} in {db.path}; it holds {', '.join(names[:10])}")
    return job


def job_extent(db: AuditDB, job: str) -> tuple[float, float]:
    """Event time from the job's first record to its last (roll-up windows, graph changes, findings)."""
    row = db.sql(EXTENT, {"job": job}).to_pylist()[0]
    start = float(row["t0"])
    return start, max(float(row["t1"]), start + 1.0)


def _value(v: Any) -> str:
    return f"{v:.6f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def reproduce(db_path: Path, figure: Figure) -> str:
    parts = []
    for name, params in figure.queries:
        args = " ".join(
            f"--param {k}={_value(v)!r}" if v == "" else f"--param {k}={_value(v)}" for k, v in params.items()
        )
        command = f"driftlog query --db {db_path} --name {name} {args}".rstrip()
        parts.append(
            f"<details><summary>SQL: <code>{escape(name)}</code> — <code>{escape(command)}</code></summary>"
            f"<pre>{escape(named(name).sql)}</pre></details>"
        )
    return "".join(parts)


def render(
    db: AuditDB, job: str | None = None, start: float | None = None, end: float | None = None
) -> tuple[str, tuple[Figure, ...], str]:
    chosen = pick_job(db, job)
    first, last = job_extent(db, chosen)
    scope = Scope(db, chosen, first if start is None else start, last if end is None else end)
    if scope.end <= scope.start:
        raise QueryError(f"the window is empty: --from {scope.start} is not before --to {scope.end}")
    figures = tuple(make(scope) for make in FIGURES)
    sections = []
    for i, f in enumerate(figures, 1):
        sections.append(
            f'<section class="figure" id="fig-{f.key}" data-figure="{f.key}" data-marks="{f.marks}">'
            f'<h2>{i}. {escape(f.title)}</h2><p class="caption">{escape(f.caption)}</p>'
            f"{f.body}{reproduce(db.path, f)}</section>"
        )
    window = f"{time.strftime('%Y-%m-%d', time.gmtime(scope.start))} {clock(scope.start)} – {clock(scope.end)} UTC"
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>driftlog report: {escape(chosen)}'
        f"</title><style>{CSS}</style></head><body><h1>driftlog report: job {escape(chosen)}</h1>"
        f'<p class="meta">Event time {escape(window)} · audit store {escape(str(db.path))} · every figure is '
        f"drawn from the named queries shown under it (sql/queries); times are UTC.</p>"
        f"{''.join(sections)}</body></html>"
    )
    return page, figures, chosen


def build_report(
    db_path: Path,
    out: Path,
    job: str | None = None,
    start: float | None = None,
    end: float | None = None,
    endpoint: Endpoint | None = None,
) -> Rendered:
    """Write the report for ``job`` (default: the job with the most roll-ups) to ``out`` (atomically); while a
    sink holds the file, through its SQL ``endpoint``."""
    began = time.perf_counter()
    page, figures, chosen = render(AuditDB(db_path, endpoint), job, start, end)
    data = page.encode()
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    return Rendered(out, chosen, len(data), time.perf_counter() - began, figures)
