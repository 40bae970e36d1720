"""The report's figures. Each is drawn from named queries (``sql/queries``) only, and names them, so a
reader can reproduce every number with ``driftlog query --name ...``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from html import escape
from typing import Any

from audit.api import AuditDB
from audit.report import svg
from audit.report.graph import graph_svg


@dataclass(frozen=True)
class Scope:
    db: AuditDB
    job: str
    start: float
    end: float
    _seen: dict[str, list[dict[str, Any]]] = field(default_factory=dict, compare=False, repr=False)

    def rows(self, name: str, windowed: bool = True, **params: Any) -> list[dict[str, Any]]:
        """A named query's rows (those whose window starts in the scope, for windowed series); a query asked
        twice with the same parameters runs once."""
        key = f"{name}|{sorted(params.items())!r}"
        if key not in self._seen:
            self._seen[key] = self.db.query(name, **params).to_pylist()
        rows = self._seen[key]
        if windowed:
            rows = [r for r in rows if self.start <= r["window_start"] < self.end]
        return rows

    @property
    def window(self) -> dict[str, Any]:
        """The parameters of the job-and-window queries (``job_causes``, ``job_decisions``)."""
        return {"job": self.job, "start": self.start, "end": self.end}


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    caption: str
    body: str  # SVG or HTML
    queries: tuple[tuple[str, dict[str, Any]], ...]
    marks: int  # data elements drawn (0: the figure says there is no data)


def _marks(body: str) -> int:
    return body.count('class="mark"')


def _empty(what: str) -> str:
    return f'<p class="empty">No {escape(what)} in the audit trail for this job and window.</p>'


def _causes(scope: Scope) -> list[dict[str, Any]]:
    """Every finding about the job in the window, one row per cause (a finding without causes: one row)."""
    return scope.rows("job_causes", windowed=False, **scope.window)


def _job_findings(scope: Scope) -> list[dict[str, Any]]:
    """The findings about the job, once each, worst first."""
    first: dict[str, dict[str, Any]] = {}
    for r in _causes(scope):
        first.setdefault(r["finding_id"], r)
    return list(first.values())


def _job_decisions(scope: Scope) -> list[dict[str, Any]]:
    """The decisions that touched the job: tagged with it, or acting on an element of its operator graph."""
    return scope.rows("job_decisions", windowed=False, **scope.window)


LABELLED_MARKERS = 12  # more findings and decisions than this on the step-time figure: labels in tooltips only


def step_time(scope: Scope) -> Figure:
    rows = scope.rows("step_time", job=scope.job)
    steps = [r for r in scope.rows("step_series", windowed=False, job=scope.job)
             if r["step_s"] is not None and scope.start <= r["step_start"] < scope.end]  # fmt: skip
    findings = sorted(_job_findings(scope), key=lambda r: (r["start_time"], r["finding_id"]))
    decisions = _job_decisions(scope)
    queries = (("step_series", {"job": scope.job}), ("step_time", {"job": scope.job}), ("job_causes", scope.window),
               ("job_decisions", scope.window))  # fmt: skip
    caption = (
        "Step time, one point per step where the trail has it (the per-step points of the step_s roll-ups), "
        "and per roll-up window the p99 and the band from the fastest to the slowest step; dashed lines mark "
        "where the job's findings began (red) and the decisions that touched the job's operator graph were "
        "taken (blue)."
    )
    if not rows:
        return Figure("step_time", "Step time", caption, _empty("step-time roll-ups"), queries, 0)
    xs = [(r["window_start"] + r["window_end"]) / 2 for r in rows]
    lo, hi = min(r["min_step_s"] for r in rows), max(r["max_step_s"] for r in rows)
    f = svg.Frame(scope.start, scope.end, lo * 0.95, hi * 1.05)
    f.axes("step time (s)")
    f.band(xs, [r["min_step_s"] for r in rows], [r["max_step_s"] for r in rows], svg.color(0), "fastest–slowest step")
    if steps:
        f.line([r["step_start"] for r in steps], [r["step_s"] for r in steps], svg.color(0), "step time (s)")
    else:  # a store written before per-step points: the window means
        f.line(xs, [r["mean_step_s"] for r in rows], svg.color(0), "mean step time (s)")
    f.line(xs, [r["p99_step_s"] for r in rows], svg.color(1), "p99 step time (s)", dash="5 3")
    labelled = len(decisions) + len(findings) <= LABELLED_MARKERS
    row = 0
    for d in decisions:
        label = f"{d['controller']} {d['action']} {', '.join(d['targets'])}"
        f.marker(d["time"], svg.DECISION, label, row % 3 if labelled else None)
        row += 1
    for r in findings:
        f.marker(
            r["start_time"], svg.FINDING, f"{r['finding']} {', '.join(r['subjects'])}", row % 6 if labelled else None
        )
        row += 1
    legend = [("step" if steps else "mean", svg.color(0)), ("p99", svg.color(1)), ("finding", svg.FINDING),
              ("decision", svg.DECISION)]  # fmt: skip
    body = f.svg(legend)
    return Figure("step_time", "Step time, findings and decisions", caption, body, queries, _marks(body))


def blocking(scope: Scope) -> Figure:
    rows = scope.rows("blocking_slowdown", job=scope.job)
    queries = (("blocking_slowdown", {"job": scope.job}),)
    caption = (
        "The steps as modelled over their ideal step from peers (blocking slowdown against the structural "
        "baseline: 1.0 = no element slower than its peers), and allocated accelerator-seconds over the compute "
        "alone (every wait, bubble and exposed communication removed)."
    )
    title = "Blocking slowdown against the structural baseline"
    if not rows:
        return Figure("blocking", title, caption, _empty("waste roll-ups"), queries, 0)
    xs = [(r["window_start"] + r["window_end"]) / 2 for r in rows]
    ratio = [r["blocking_slowdown"] or 1.0 for r in rows]  # 1.0: a window without the ideal (older records)
    ys = ratio + [r["slowdown_over_compute"] or 1.0 for r in rows]
    f = svg.Frame(scope.start, scope.end, min(1.0, *ys) * 0.98, max(ys) * 1.05)
    f.axes("× baseline")
    f.parts.append(
        f'<line x1="{f.left}" x2="{svg.WIDTH - f.right}" y1="{f.y(1):.1f}" y2="{f.y(1):.1f}" '
        'stroke="#333" stroke-dasharray="2 2"/>'
    )
    f.line(xs, ratio, svg.FINDING, "blocking slowdown (ideal from peers)")
    f.line(xs, [r["slowdown_over_compute"] for r in rows], svg.color(0), "allocated / compute", dash="5 3")
    body = f.svg([("over the ideal", svg.FINDING), ("all waiting", svg.color(0))])
    return Figure("blocking", title, caption, body, queries, _marks(body))


def wasted(scope: Scope) -> Figure:
    rows = scope.rows("wasted_by_window", job=scope.job)
    queries = (("wasted_by_window", {"job": scope.job}), ("wasted_by_cause", {"job": scope.job}))
    caption = (
        "Accelerator-seconds wasted per roll-up window, stacked by cause; they add up to the allocated "
        "accelerator-seconds minus those spent computing."
    )
    title = "Wasted accelerator-seconds by cause"
    if not rows:
        return Figure("wasted", title, caption, _empty("waste roll-ups"), queries, 0)
    causes = sorted({r["cause"] for r in rows})
    windows: dict[tuple[float, float], dict[str, float]] = defaultdict(dict)
    for r in rows:
        windows[(r["window_start"], r["window_end"])][r["cause"]] = r["wasted_accel_s"] or 0.0
    top = max(sum(v.values()) for v in windows.values()) or 1.0
    f = svg.Frame(scope.start, scope.end, 0.0, top * 1.08)
    f.axes("accelerator-s")
    for (w0, w1), by_cause in sorted(windows.items()):
        pad = (w1 - w0) * 0.06
        base = 0.0
        for i, cause in enumerate(causes):
            v = by_cause.get(cause, 0.0)
            if v > 0:
                f.rect(w0 + pad, w1 - pad, base, base + v, svg.color(i), f"{cause}: {svg.fmt(v)} accelerator-s")
            base += v
    body = f.svg([(c, svg.color(i)) for i, c in enumerate(causes)])
    return Figure("wasted", title, caption, body, queries, _marks(body))


def economics(scope: Scope) -> Figure:
    rows = scope.rows("output_economics", job=scope.job)
    queries = (("output_economics", {"job": scope.job}), ("cost_per_output", {"job": scope.job}))
    title = "Cost and energy per output"
    caption = (
        "Accelerator-seconds, money (with DRIFTLOG_PRICE_PER_ACCEL_HOUR set) and energy per output unit, "
        "each as a ratio to the job's first window (absolute values in the tooltips and below)."
    )
    if not rows:
        return Figure("economics", title, caption, _empty("per-output roll-ups"), queries, 0)
    xs = [(r["window_start"] + r["window_end"]) / 2 for r in rows]
    series = []
    for key, label in (
        ("accel_s_per_output", "accelerator-s per output"),
        ("cost_per_output", "cost per output"),
        ("energy_j_per_output", "energy (J) per output"),
    ):
        values = [r[key] for r in rows]
        first = next((v for v in values if v), None)
        if first:
            series.append((label, [v / first if v is not None else None for v in values], values))
    ys = [v for _, ratios, _ in series for v in ratios if v is not None] or [1.0]
    f = svg.Frame(scope.start, scope.end, min(ys) * 0.97, max(ys) * 1.03)
    f.axes("× first window")
    for i, (label, ratios, _) in enumerate(series):
        f.line(xs, ratios, svg.color(i + 2), f"{label} (× first window)")  # type: ignore[arg-type]
    first_last = "; ".join(
        f"{label}: {svg.fmt(values[0] or 0)} → {svg.fmt(values[-1] or 0)}" for label, _, values in series
    )
    body = f.svg([(label, svg.color(i + 2)) for i, (label, _, _) in enumerate(series)])
    body += f'<p class="note">First → last window: {escape(first_last)}.</p>'
    return Figure("economics", title, caption, body, queries, _marks(body))


def operator_graph(scope: Scope) -> Figure:
    queries = (("graph_at", {"job": scope.job, "at": scope.end}), ("job_causes", scope.window))
    title = "Operator graph, attributed elements highlighted"
    caption = (
        "The job's operator graph at the end of the window, one column per kind of element; the elements "
        "findings name and their ranked causes are red, the rest grey (large kinds are sampled: the "
        "highlighted elements and their neighbours first)."
    )
    graphs = scope.rows("graph_at", windowed=False, job=scope.job, at=scope.end)
    if not graphs or not graphs[0]["nodes"]:
        return Figure("graph", title, caption, _empty("operator graph"), queries, 0)
    causes = _causes(scope)
    hot = {c["cause"]: c["rank"] for c in causes if c["cause_kind"] == "element"}
    for r in _job_findings(scope):
        for s in r["subjects"]:
            hot.setdefault(s, 99)
    for c in causes:
        if c["cause_kind"] == "decision" and c["decided_by"]:
            hot.setdefault(f"controller:{c['decided_by']}", c["rank"])
    body = graph_svg(graphs[0]["nodes"], graphs[0]["edges"] or [], hot)
    return Figure("graph", title, caption, body, queries, _marks(body))


def coherence(scope: Scope, window_s: float = 60.0) -> Figure:
    span = max(scope.end - scope.start, 1.0)
    bucket = max(1.0, float(f"{span / 30:.1g}"))
    timeline = [
        r
        for r in scope.rows("job_coherence_timeline", windowed=False, job=scope.job, bucket_s=bucket, window_s=window_s)
        if scope.start - bucket < r["bucket_start"] < scope.end
    ]
    decisions = _job_decisions(scope)
    conflicts = scope.rows("controller_conflicts", windowed=False, window_s=window_s)
    queries = (
        ("job_coherence_timeline", {"job": scope.job, "bucket_s": bucket, "window_s": window_s}),
        ("job_decisions", scope.window),
        ("controller_conflicts", {"window_s": window_s}),
    )
    title = "Control-coherence timeline"
    caption = (
        f"Each controller's decisions on its own lane; a red link joins two decisions by different "
        f"controllers on the same element within {window_s:g} s; the bars on top are the coherent share of "
        f"the decisions in each {svg.fmt(bucket)} s bucket (1 = no conflict)."
    )
    if not decisions:
        return Figure("coherence", title, caption, _empty("control decisions"), queries, 0)
    controllers = sorted({d["controller"] for d in decisions})
    lane = {c: i for i, c in enumerate(controllers)}
    height = 90 + 26 * len(controllers)
    f = svg.Frame(scope.start, scope.end, 0.0, 1.0, height=height, left=170)
    bottom = height - f.bottom
    for r in timeline:
        x0, x1 = f.x(max(r["bucket_start"], scope.start)), f.x(min(r["bucket_start"] + bucket, scope.end))
        h = 40 * r["coherence"]
        f.parts.append(
            f'<rect class="mark" x="{x0:.1f}" y="{f.top + 40 - h:.1f}" width="{max(x1 - x0 - 1, 1):.1f}" '
            f'height="{max(h, 0.5):.1f}" fill="{svg.color(2) if r["coherence"] >= 1 else svg.FINDING}">'
            f"<title>{r['decisions']} decisions, {r['in_conflict']} in conflict: coherence "
            f"{svg.fmt(r['coherence'])}</title></rect>"
        )
    f.parts.append(f'<text x="{f.left - 6}" y="{f.top + 24}" text-anchor="end">coherent share</text>')

    def lane_y(c: str) -> float:
        return f.top + 62 + 26 * lane[c]

    for c in controllers:
        y = lane_y(c)
        f.parts.append(
            f'<line x1="{f.left}" x2="{svg.WIDTH - f.right}" y1="{y}" y2="{y}" stroke="#ddd"/>'
            f'<text x="{f.left - 6}" y="{y + 4}" text-anchor="end">{escape(c[:26])}</text>'
        )
    at = {d["id"]: d for d in decisions}
    for c in conflicts:
        a, b = at.get(c["first_id"]), at.get(c["second_id"])
        if a and b:
            f.parts.append(
                f'<line class="mark" x1="{f.x(a["time"]):.1f}" y1="{lane_y(a["controller"])}" '
                f'x2="{f.x(b["time"]):.1f}" y2="{lane_y(b["controller"])}" stroke="{svg.FINDING}" '
                f'stroke-width="1.5"><title>{c["conflict"]}: {escape(", ".join(c["shared_targets"]))}'
                "</title></line>"
            )
    for d in decisions:
        f.parts.append(
            f'<circle class="mark" cx="{f.x(d["time"]):.1f}" cy="{lane_y(d["controller"])}" r="5" '
            f'fill="{svg.DECISION}"><title>{svg.clock(d["time"])} {escape(d["controller"])} '
            f"{escape(d['action'])} → {escape(', '.join(d['targets']))}: {escape(d['reason'] or '')}"
            "</title></circle>"
        )
    for v in svg.ticks(scope.start, scope.end):
        f.parts.append(f'<text x="{f.x(v):.1f}" y="{bottom + 16}" text-anchor="middle">{svg.clock(v)}</text>')
    body = f.svg([("decision", svg.DECISION), ("conflict", svg.FINDING), ("coherent bucket", svg.color(2))])
    return Figure("coherence", title, caption, body, queries, _marks(body))


MAX_DECISIONS = 12  # decision ids listed in one cell; the query has them all


def _fought(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """One row for the decisions of the controllers that fought (a coherence finding's causes)."""
    ids = [r["cause"] for r in rows]
    shown = ", ".join(ids[:MAX_DECISIONS]) + (
        f" … +{len(ids) - MAX_DECISIONS} more" if len(ids) > MAX_DECISIONS else ""
    )
    controllers = sorted({r["decided_by"] for r in rows if r["decided_by"]})
    return (f"1–{len(ids)}", f"{len(ids)} decisions ({rows[0]['how']}): {shown}", "", "", "", ", ".join(controllers))


def _attributed(r: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(r["rank"]),
        r["cause"],
        f"{r['share']:.0%}" if r["share"] is not None else "",
        f"×{r['slowdown']:.3f}" if r["slowdown"] is not None else "",
        svg.fmt(r["cost_accel_s"]) if r["cost_accel_s"] is not None else "",
        f"{r['decided_by']} ({r['decision_action']})" if r["decided_by"] else "",
    )


def causes_table(scope: Scope) -> Figure:
    rows = [r for r in _causes(scope) if r["cause"] is not None]
    queries = (("job_causes", scope.window),)
    title = "Ranked causes"
    caption = (
        "Every finding about the job in the window that has causes, worst first by its accelerator-seconds "
        "where it has a cost: its ranked causes with their share of the finding's cost, the slowdown with the "
        "cause healed (actual / healed), the accelerator-seconds attributed and the controller behind a "
        "decision; for a loss of control coherence, the decisions of the controllers that fought."
    )
    if not rows:
        return Figure("causes", title, caption, _empty("attributed causes"), queries, 0)
    by_finding: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_finding[r["finding_id"]].append(r)
    head = ("#", "finding", "began", "cost (accel-s)", "rank", "cause", "share", "slowdown", "accelerator-s",
            "decided by")  # fmt: skip
    lines = ["<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for n, causes in enumerate(by_finding.values(), 1):
        first = causes[0]
        attributed = [_attributed(c) for c in causes if c["how"] == "attributed"]
        fought = [c for c in causes if c["how"] != "attributed"]
        cost = first["finding_cost_accel_s"]
        finding = (str(n), first["finding"], svg.clock(first["start_time"]), "" if cost is None else svg.fmt(cost))
        for cells in [*attributed, *([_fought(fought)] if fought else [])]:
            lines.append(
                f'<tr class="mark" data-finding="{escape(first["finding"])}">'
                + "".join(f"<td>{escape(c)}</td>" for c in (*finding, *cells))
                + "</tr>"
            )
    body = "\n".join([*lines, "</tbody></table>"])
    return Figure("causes", title, caption, body, queries, _marks(body))


FIGURES = (step_time, blocking, wasted, economics, operator_graph, coherence, causes_table)
