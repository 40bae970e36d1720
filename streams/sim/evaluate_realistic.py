"""``driftlog eval`` in realistic mode: run the realistic scenarios through the engine and score what it
finds against both slowdown definitions of the ground truth.

Per run: for each judged finding kind (``structural_slowdown``, ``step_time_drift``) its first finding at or
after the first cause's onset, and that finding's ranked attributions (AC@1: the truth element ranked first;
``named_first``: the kinds of element ranked first); the top cause's ``slowdown`` (heal only X) and
``slowdown_unhealed`` (leave only X unhealed) against the truth over the same traced steps (``|estimate /
truth - 1|``; absent fields are not scored, so the engine is judged on what it emits). A scenario with
several causes gets a row per cause: ``AC@causes`` is the share of runs that rank it among the top n (n
causes), and its errors are those of *its own* attribution (the top one can be only one of them) against
its own truth — two overlapping causes are where the two definitions differ, so an engine that swaps them
shows there; the job's
``blocking_slowdown`` roll-ups (their step-weighted mean) against the mean of the truth's per-step T(actual) /
T(ideal); every finding on a healthy run (all of them false); and, per analysed step, the engine's modelled
step time against the recorded one (``StepReport.whatif``).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.config import Settings
from streams.engine.engine import Engine, EngineOutput
from streams.engine.timeline import Chunk
from streams.pipeline import Processor, admission_of, build_processor, engine_config
from streams.sim.evaluate import _step_locator
from streams.sim.exporter import Exporter
from streams.sim.realistic import REALISTIC
from streams.testing import run_stream

JUDGED = ("structural_slowdown", "step_time_drift")


@dataclass
class Recording(Engine):
    """The engine, keeping each analysed step's (modelled, recorded) step time (reports are not records)."""

    modelled: list[tuple[float, float]] = field(default_factory=list)

    def _keep(self, out: EngineOutput) -> EngineOutput:
        self.modelled.extend((r.whatif.step_s, r.whatif.observed_s) for r in out.reports)
        return out

    def process(self, chunk: Chunk) -> EngineOutput:
        return self._keep(super().process(chunk))

    def advance(self, time: float) -> EngineOutput:
        return self._keep(super().advance(time))

    def close(self) -> EngineOutput:
        return self._keep(super().close())


Estimates = tuple[float | None, float | None]  # (slowdown healing only X, slowdown leaving only X unhealed)


@dataclass
class Judged:
    """What one finding kind's first finding after the onset named, and each named cause's estimates."""

    named: list[str]
    estimates: dict[str, Estimates] = field(default_factory=dict)
    steps: tuple[int, int] | None = None  # (first, last) analysed step the causes were judged on

    def of(self, element: str | None) -> Estimates:
        """``element``'s estimates; None: the top cause's."""
        key = self.named[0] if element is None and self.named else element
        return self.estimates.get(key or "", (None, None))


@dataclass
class RealisticRun:
    scenario: str
    seed: int
    truth: dict[str, Any]
    judged: dict[str, Judged] = field(default_factory=dict)  # finding kind -> its first finding after onset
    findings: dict[str, int] = field(default_factory=dict)  # finding kind -> how many
    blocking: list[tuple[float, int]] = field(default_factory=list)  # blocking_slowdown roll-ups: (mean, n)
    modelled: list[tuple[float, float]] = field(default_factory=list)

    @property
    def cause(self) -> dict[str, Any] | None:
        causes = self.truth["causes"]
        return causes[0] if causes else None

    @property
    def onset(self) -> int:
        return min((c["start_step"] for c in self.truth["causes"]), default=0)


def run_realistic(name: str, seed: int, ranks: int, steps: int, exporter: Exporter | None = None,
                  settings: Settings | None = None) -> RealisticRun:  # fmt: skip
    """One run through the processor ``settings`` describe (None: the engine's defaults)."""
    scenario = REALISTIC[name](seed, ranks, steps, exporter)
    items = [(kind, value) for kind, _, value in scenario.run()]
    engine = Recording() if settings is None else Recording(engine_config(settings))
    out = run_stream(items, Processor(engine) if settings is None else Processor(engine, admission_of(settings)))
    run = RealisticRun(name, seed, scenario.ground_truth(seed), modelled=engine.modelled)
    read_records(run, [(r.type, r.id, r.body) for r in out.audit])
    return run


def read_records(run: RealisticRun, records: list[tuple[str, str, dict[str, Any]]]) -> None:
    """What the engine's audit records (type, id, body) say about ``run``: findings by kind, the judged
    kinds' first finding at or after the onset with its ranked causes, the job's blocking slowdown roll-ups."""
    causes_of: dict[str, list[dict[str, Any]]] = {}
    for _, _, body in (b for b in records if b[0] == "attribution"):
        causes_of.setdefault(body["finding_id"], []).append(body)
    step_at = _step_locator(run.truth)
    onset = run.onset
    for _, rid, body in sorted((b for b in records if b[0] == "finding"), key=lambda b: b[2]["end"]):
        kind = body["kind"]
        run.findings[kind] = run.findings.get(kind, 0) + 1
        if kind in JUDGED and kind not in run.judged and step_at(body["end"]) >= onset:
            run.judged[kind] = _judged(sorted(causes_of.get(rid, []), key=lambda c: c["rank"]))
    job = f"job:{run.truth['job']}"
    run.blocking = [(b["mean"], b["n"]) for t, _, b in records
                    if t == "metrics_rollup" and b["entity"] == job and b["name"] == "blocking_slowdown"]  # fmt: skip


def _judged(ranked: list[dict[str, Any]]) -> Judged:
    if not ranked:
        return Judged([])
    ev = ranked[0].get("evidence", {})
    steps = (ev["first_step"], ev["last_step"]) if "first_step" in ev else None
    estimates = {c["cause"]: (c.get("slowdown"), c.get("slowdown_unhealed")) for c in reversed(ranked)}
    return Judged([c["cause"] for c in ranked], estimates, steps)


def true_slowdowns(truth: dict[str, Any], steps: tuple[int, int] | None, cause: int = 0) -> tuple[float, float] | None:
    """The cause's (heal only X, leave only X unhealed) slowdowns over the traced steps in ``steps`` (None:
    over all its traced steps); ``cause``: its index in the truth."""
    if len(truth["causes"]) <= cause:
        return None
    c, traced = truth["causes"][cause], truth["traced"]
    lo, hi = steps if steps is not None else (c["start_step"], c["end_step"] - 1)
    rows = [i for i, s in enumerate(traced["step"]) if lo <= s <= hi and c["start_step"] <= s < c["end_step"]]
    if not rows:
        return None
    actual, ideal = (sum(traced[k][i] for i in rows) for k in ("actual_s", "ideal_s"))
    healed, alone = (sum(c[k][i] for i in rows) for k in ("healed_s", "ideal_except_s"))
    return actual / healed, alone / ideal


def _err(estimate: float | None, truth: float | None) -> float | None:
    return None if estimate is None or truth is None else abs(estimate / truth - 1)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def score_attribution(runs: list[RealisticRun]) -> list[dict[str, Any]]:
    """One row per scenario with causes, judged finding kind and cause (in the truth's order)."""
    rows = []
    for scenario in dict.fromkeys(r.scenario for r in runs):
        mine = [r for r in runs if r.scenario == scenario and r.cause is not None]
        n = min((len(r.truth["causes"]) for r in mine), default=0)
        for kind, i in ((k, i) for k in JUDGED for i in range(n)):
            found = [(r, j) for r in mine if (j := r.judged.get(kind)) is not None]
            scored = [(true_slowdowns(r.truth, j.steps, i), j.of(_element(r, i) if n > 1 else None)) for r, j in found]
            rows.append({
                "scenario": scenario, "finding": kind, "cause": mine[0].truth["causes"][i]["kind"],
                "runs": len(mine), "found": len(found) / len(mine),
                "AC@1": sum(1 for r, j in found if j.named[:1] == [_element(r, i)]) / len(mine),
                "AC@causes": sum(1 for r, j in found if _element(r, i) in j.named[:n]) / len(mine),
                "slowdown_err": _median([_err(e[0], t[0] if t else None) for t, e in scored]),
                "unhealed_err": _median([_err(e[1], t[1] if t else None) for t, e in scored]),
                "named_first": _counts(j.named[0].split(":")[0] if j.named else "nothing" for _, j in found),
            })  # fmt: skip
    return rows


def _counts(values: Iterable[str]) -> str:
    """``a:2 b:1``, most common first (``-``: none)."""
    return " ".join(f"{v}:{n}" for v, n in Counter(values).most_common()) or "-"


def _element(run: RealisticRun, cause: int = 0) -> str:
    return str(run.truth["causes"][cause]["element"])


def score_jobs(runs: list[RealisticRun]) -> list[dict[str, Any]]:
    """One row per scenario: the job's blocking slowdown error, what noise alone costs the ideal step
    (T(ideal) / T(ideal without noise) - 1: how far an ideal of typical durations may fall below the truth's),
    findings (all false on a healthy run), and the modelled step against the recorded one (relative error
    quantiles, share within 2%)."""
    rows = []
    for scenario in dict.fromkeys(r.scenario for r in runs):
        mine = [r for r in runs if r.scenario == scenario]
        errors = []
        for r in mine:
            traced = r.truth["traced"]
            truth = statistics.mean(a / i for a, i in zip(traced["actual_s"], traced["ideal_s"], strict=True))
            n = sum(k for _, k in r.blocking)
            errors.append(_err(sum(m * k for m, k in r.blocking) / n if n else None, truth))
        noise = [statistics.mean(i / q for i, q in zip(r.truth["traced"]["ideal_s"],
                                                        r.truth["traced"]["noiseless_ideal_s"], strict=True))
                 for r in mine]  # fmt: skip
        rel = np.array([m / o - 1 for r in mine for m, o in r.modelled if o > 0])
        healthy = all(r.cause is None for r in mine)
        q = np.quantile(rel, [0.05, 0.5, 0.95]).tolist() if rel.size else [None] * 3
        rows.append({
            "scenario": scenario, "runs": len(mine), "blocking_err": _median(errors),
            "blocking_runs": sum(1 for e in errors if e is not None), "noise_cost": statistics.mean(noise) - 1,
            "findings": sum(sum(r.findings.values()) for r in mine),
            "false_findings": sum(sum(r.findings.values()) for r in mine) if healthy else None,
            "steps_modelled": int(rel.size), "model_err_p5": q[0], "model_err_p50": q[1], "model_err_p95": q[2],
            "within_2pct": float(np.mean(np.abs(rel) <= 0.02)) if rel.size else None,
            "finding_kinds": _counts(k for r in mine for k, n in r.findings.items() for _ in range(n)),
        })  # fmt: skip
    return rows


def throughput(ranks: int, steps: int, exporter: Exporter | None = None, repeats: int = 3,
               settings: Settings | None = None) -> dict[str, Any]:  # fmt: skip
    """Engine throughput on realistic input (``realistic-slow-rank``, seed 1): op spans per second through
    the in-process processor, the median of ``repeats`` runs (the input generated once, outside the timing)."""
    scenario = REALISTIC["realistic-slow-rank"](1, ranks, steps, exporter)
    items = [(kind, value) for kind, _, value in scenario.run()]
    spans, seconds = 0, []
    for _ in range(repeats):
        started = time.perf_counter()
        out = run_stream(items, None if settings is None else build_processor(settings))
        seconds.append(time.perf_counter() - started)
        spans = out.samples_by_kind["op"]
    median = statistics.median(seconds)
    traced = len(scenario.per_step["step"])
    return {"ranks": ranks, "steps": steps, "traced_steps": traced, "spans": spans, "median_s": median,
            "spans_per_s": spans / median, "ms_per_traced_step": 1000 * median / max(1, traced)}  # fmt: skip
