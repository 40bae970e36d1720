"""What the engine derives from a job's analysed steps: attributions, cascades, control regressions, waste.

- **Attribution** of a job-level finding (step-time drift): its ranked causes over the analysed steps since
  the finding's start, once ``ATTRIBUTION_STEPS`` of them exist (:mod:`attribution`).
- **Straggler cascade**: for a straggler finding, the ranks whose last span would have ended earlier by
  more than ``CASCADE_MIN`` of the step had the root been healed (what-if), grouped by the edge the delay
  travelled: the root's tensor-parallel peers, its pipeline (same replica, other stages), and everyone
  else (through collectives).
- **Control regression**: ``REGRESSION_STEPS`` analysed steps before and after a decision; if the mean step
  time rose by at least ``REGRESSION_MIN`` and an element the decision's targets host (operator graph)
  explains at least half of the rise, a finding names the decision as the first cause.
- **Waste roll-ups**: per window of ``window`` analysed steps, accelerator-seconds by cause (economics).
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.engine import elements
from streams.engine.attribution import StepGains, containment, rank_causes, specific_chain
from streams.engine.detectors.critical_path import CriticalPathShift, composition
from streams.engine.detectors.sync_loss import PhaseDrift
from streams.engine.economics import WASTE_CAUSES, StepCost
from streams.engine.findings import Finding
from streams.engine.opgraph import OperatorGraph
from streams.engine.rollup import Rollup
from streams.engine.steps import StepReport

ATTRIBUTION_STEPS = 10
KEEP_STEPS = 512
CASCADE_MIN = 0.01
REGRESSION_STEPS = 10
REGRESSION_MIN = 0.03


@dataclass(frozen=True)
class Attribution:
    finding_id: str
    rank: int
    cause_kind: str  # element | decision
    cause: str
    share: float
    slowdown: float
    cost_accel_s: float
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return hashlib.sha256(f"attr|{self.finding_id}|{self.rank}|{self.cause}".encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "finding_id": self.finding_id,
            "rank": self.rank,
            "cause_kind": self.cause_kind,
            "cause": self.cause,
            "share": round(self.share, 6),
            "slowdown": round(self.slowdown, 6),
            "cost_accel_s": round(self.cost_accel_s, 6),
            "evidence": self.evidence,
        }


def element_attributions(finding_id: str, window: list[StepGains]) -> list[Attribution]:
    """The ranked element causes of a finding over ``window`` (the analysed steps they were judged on)."""
    steps = {"first_step": window[0].step, "last_step": window[-1].step, "steps": len(window)}
    return [
        Attribution(
            finding_id,
            c.rank,
            "element",
            c.element,
            c.share,
            c.slowdown,
            c.cost_accel_s,
            {"gain_s_per_step": round(c.gain_s, 6), **steps},
        )
        for c in rank_causes(window)
    ]


@dataclass
class _Decision:
    id: str
    time: float
    targets: tuple[str, ...]


@dataclass
class Derived:
    findings: list[Finding] = field(default_factory=list)
    attributions: list[Attribution] = field(default_factory=list)
    rollups: list[Rollup] = field(default_factory=list)


@dataclass
class JobDerivations:
    job: str
    graph: OperatorGraph
    window: int = 50
    gains: deque[StepGains] = field(default_factory=lambda: deque(maxlen=KEEP_STEPS))
    _unattributed: list[Finding] = field(default_factory=list)
    _stragglers: list[Finding] = field(default_factory=list)
    _decisions: list[_Decision] = field(default_factory=list)
    cp_shift: CriticalPathShift | None = None
    phase: PhaseDrift | None = None
    _waste: list[tuple[float, float, StepCost]] = field(default_factory=list)  # (t0, observed_s, cost)

    def on_finding(self, finding: Finding) -> None:
        """A finding of the job's detectors that wants structural follow-up."""
        if finding.kind == "step_time_drift":
            self._unattributed.append(finding)
        elif finding.kind == "straggler":
            self._stragglers.append(finding)

    def on_decision(self, decision_id: str, time: float, targets: tuple[str, ...]) -> None:
        self._decisions.append(_Decision(decision_id, time, targets))

    def on_reports(self, reports: list[StepReport], out: Derived, final: bool = False) -> None:
        for r in reports:
            w = r.whatif
            contains = {c.element: c.contains for c in w.candidates if c.contains}
            self.gains.append(StepGains(r.step, r.t0, w.step_s, w.baseline_s, r.ranks, w.gains(), contains))
            self._cascades(r, out)
            if self.cp_shift is None:
                self.cp_shift = CriticalPathShift(self.job)
            cp = r.critical_path
            shifted = self.cp_shift.update(r.step, r.t0, r.t0 + w.observed_s, composition(cp.stages, cp.op_classes))
            if shifted is not None:
                out.findings.append(shifted)
            self.phase = self.phase or PhaseDrift(self.job)
            drifted = self.phase.update(r.step, r.t0, w.observed_s, r.replica_phase)
            if drifted is not None:
                out.findings.append(drifted)
            self._waste.append((r.t0, w.observed_s, r.cost))
            if len(self._waste) >= self.window:
                out.rollups.extend(self._waste_rollups())
        self._attribute(out, final)
        self._regressions(out)
        if final and self._waste:  # the end of the job: its partial window too
            out.rollups.extend(self._waste_rollups())

    def _attribute(self, out: Derived, final: bool) -> None:
        for finding in list(self._unattributed):
            since = [g for g in self.gains if g.t0 >= finding.start]
            if len(since) < ATTRIBUTION_STEPS and not (final and since):
                continue
            self._unattributed.remove(finding)
            out.attributions.extend(element_attributions(finding.id, since))

    def _cascades(self, r: StepReport, out: Derived) -> None:
        w = r.whatif
        top = next((c for c in w.candidates if c.dimension == "rank"), None)
        if top is None or w.healed_rank_ends is None:
            return
        for finding in [f for f in self._stragglers if f.subjects[0] == top.element]:
            self._stragglers.remove(finding)
            moved = w.rank_ends - w.healed_rank_ends
            affected = np.flatnonzero(np.isfinite(moved) & (moved > CASCADE_MIN * w.step_s))
            root = elements.index_of(top.element, "rank")
            if len(affected[affected != root]):
                out.findings.append(cascade(finding, root, affected, r))

    def _regressions(self, out: Derived) -> None:
        for d in list(self._decisions):
            before = [g for g in self.gains if g.t0 < d.time][-REGRESSION_STEPS:]
            after = [g for g in self.gains if g.t0 >= d.time][1 : REGRESSION_STEPS + 1]  # one step to settle
            if len(after) < REGRESSION_STEPS:
                continue
            self._decisions.remove(d)
            if len(before) < REGRESSION_STEPS:
                continue
            found = regression(d, before, after, self.graph)
            if found is not None:
                out.findings.append(found[0])
                out.attributions.extend(found[1])

    def _waste_rollups(self) -> list[Rollup]:
        rows, self._waste = self._waste, []
        start, end = rows[0][0], rows[-1][0] + rows[-1][1]
        costs = [cost for _, _, cost in rows]
        series = {
            elements.cause(cause): ("wasted_accel_s", tuple(c.waste_s[cause] for c in costs)) for cause in WASTE_CAUSES
        }
        series[elements.job(self.job)] = ("allocated_accel_s", tuple(c.allocated_s for c in costs))
        out = [Rollup(self.job, entity, name, start, end, v, sum(v)) for entity, (name, v) in series.items()]
        compute = tuple(c.compute_s for c in costs)
        out.append(Rollup(self.job, elements.job(self.job), "compute_accel_s", start, end, compute, sum(compute)))
        return out


def cascade(straggler: Finding, root: int, affected: np.ndarray, r: StepReport) -> Finding:
    """The ranks a root straggler delays, by the edge the delay travelled."""
    pos = r.positions
    dp, pp, _ = pos[root]
    others = affected[affected != root]
    same_replica = pos[others, 0] == dp
    tensor = same_replica & (pos[others, 1] == pp)
    pipeline = same_replica & ~tensor
    gain = r.whatif.step_s - float(np.max(r.whatif.healed_rank_ends))  # type: ignore[arg-type]
    job = r.job
    return Finding(
        kind="straggler_cascade",
        subjects=(elements.rank(job, root), *straggler.subjects[1:]),
        start=straggler.start,
        end=r.t0 + r.whatif.observed_s,
        severity=round(len(others) / max(1, r.ranks - 1), 6),
        evidence={
            "root": elements.rank(job, root),
            "affected_ranks": len(others),
            "via_tensor_parallel": int(tensor.sum()),
            "via_pipeline": int(pipeline.sum()),
            "via_collectives": int((~same_replica).sum()),
            "affected_sample": [int(a) for a in others[:64]],
            "step": r.step,
            "measure": f"ranks whose last span ends > {CASCADE_MIN:.0%} of the step earlier with the root healed",
        },
        cost={"accel_s_per_step": round(r.ranks * max(0.0, gain), 6)},
    )


def regression(
    d: _Decision, before: list[StepGains], after: list[StepGains], graph: OperatorGraph
) -> tuple[Finding, list[Attribution]] | None:
    """A decision after which the job got slower, through an element its targets host."""
    mean_before = sum(g.step_s for g in before) / len(before)
    mean_after = sum(g.step_s for g in after) / len(after)
    rise = mean_after - mean_before
    if rise < REGRESSION_MIN * mean_before:
        return None

    def mean_gain(window: list[StepGains], element: str) -> float:
        return sum(g.gains.get(element, 0.0) for g in window) / len(window)

    elements = {e for g in after for e in g.gains}
    hosted = [e for e in elements if any(graph.hosts(t, e) for t in d.targets)]
    if not hosted:
        return None
    rises = {e: mean_gain(after, e) - mean_gain(before, e) for e in hosted}
    element = specific_chain(max(sorted(rises), key=rises.__getitem__), rises, containment(after))[-1]
    explained = rises[element]
    if explained < 0.5 * rise:
        return None
    ranks = sum(g.ranks for g in after) / len(after)
    cost = ranks * rise * len(after)
    finding = Finding(
        kind="control_regression",
        subjects=(*d.targets, element),
        start=d.time,
        end=after[-1].t0 + after[-1].step_s,
        severity=round(mean_after / mean_before, 6),
        evidence={
            "decision": d.id,
            "step_s_before": round(mean_before, 6),
            "step_s_after": round(mean_after, 6),
            "steps_compared": len(after),
            "element": element,
            "element_gain_s_before": round(mean_gain(before, element), 6),
            "element_gain_s_after": round(mean_gain(after, element), 6),
        },
        cost={"accel_s": round(cost, 6)},
    )
    share = min(1.0, explained / rise)
    slowdown = mean_after / mean_before
    attributions = [
        Attribution(finding.id, 1, "decision", d.id, share, slowdown, share * cost, {"via": element}),
        Attribution(
            finding.id,
            2,
            "element",
            element,
            share,
            mean_after / (mean_after - mean_gain(after, element)),
            ranks * mean_gain(after, element) * len(after),
            {"hosted_by": list(d.targets)},
        ),
    ]
    return finding, attributions
