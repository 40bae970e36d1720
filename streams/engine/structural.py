"""What the engine derives from a job's analysed steps, coordinated per job: its blocking slowdown against the
ideal step from peers (roll-ups, and `structural_slowdown` findings with ranked causes, :mod:`blocking`,
:mod:`detectors.structural_slowdown`), attributions of its step-time
drift findings (:mod:`attribution`, once ``ATTRIBUTION_STEPS`` analysed steps follow the finding's start),
straggler cascades (:mod:`cascade`), control regressions (:mod:`regression`), critical-path shifts and
replica phase drift (:mod:`detectors`), and waste roll-ups per window of ``window`` steps or ``window_s``
seconds (:mod:`waste`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import partial

from streams.engine.attribution import (
    Attribution,
    StepGains,
    StructuralGains,
    Together,
    element_attributions,
    structural_attributions,
)
from streams.engine.blocking import blocking_rollups
from streams.engine.carry import Chained, Timeline
from streams.engine.cascade import cascade, cascade_root
from streams.engine.decompose import Pending, Structural
from streams.engine.detectors.critical_path import CriticalPathShift, composition
from streams.engine.detectors.structural_slowdown import IdealStep, StructuralSlowdown
from streams.engine.detectors.sync_loss import PhaseDrift
from streams.engine.findings import Finding
from streams.engine.opgraph import OperatorGraph
from streams.engine.regression import Decision, regression, windows
from streams.engine.rollup import Rollup, Windows
from streams.engine.steps import StepReport
from streams.engine.systematic import Systematic
from streams.engine.waste import WasteRow, waste_rollups

ATTRIBUTION_STEPS = 10
KEEP_STEPS = 512
StepRow = tuple[WasteRow, IdealStep]  # what a roll-up window keeps of an analysed step


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
    window_s: float = 600.0  # a roll-up window ends after ``window`` steps or this long, whichever first
    structural_threshold: float = 0.10
    gains: deque[StepGains] = field(default_factory=lambda: deque(maxlen=KEEP_STEPS))
    _unattributed: list[Finding] = field(default_factory=list)
    _stragglers: list[Finding] = field(default_factory=list)
    _decisions: list[Decision] = field(default_factory=list)
    cp_shift: CriticalPathShift | None = None
    phase: PhaseDrift | None = None
    _together: deque[tuple[int, Pending, float]] = field(default_factory=deque)  # decomposed steps of the episode
    _timeline: Timeline = field(default_factory=Timeline)  # where the last analysed step ended (:mod:`carry`)
    _systematic: Systematic = field(default_factory=Systematic)  # its ranks' evidence (:mod:`systematic`)
    _windows: Windows[StepRow] = field(init=False)
    structural: StructuralSlowdown = field(init=False)

    def __post_init__(self) -> None:
        self._windows = Windows(self.window, self.window_s)
        self.structural = StructuralSlowdown(self.job, self.structural_threshold)
        self._together = deque(maxlen=self.structural.window)

    def on_finding(self, finding: Finding) -> None:
        """A finding of the job's detectors that wants structural follow-up."""
        if finding.kind == "step_time_drift":
            self._unattributed.append(finding)
        elif finding.kind == "straggler":
            self._stragglers.append(finding)

    def on_decision(self, decision_id: str, time: float, targets: tuple[str, ...]) -> None:
        self._decisions.append(Decision(decision_id, time, targets))

    def on_reports(self, reports: Iterable[StepReport], out: Derived, final: bool = False) -> list[StepReport]:
        """The job's analysed steps, in order; returns them released (:meth:`StepWhatIf.released`). Taken one
        at a time: with a lazy ``reports`` (:meth:`JobSteps.flushing`), one step's graph is alive at a time."""
        released = list(map(partial(self._on_report, out=out), reports))  # (map keeps no earlier report)
        self._attribute(out, final)
        self._regressions(out)
        if final:  # the end of the job: its partial window too
            out.rollups.extend(self._window_rollups(self._windows.flush()))
        return released

    def _on_report(self, r: StepReport, out: Derived) -> StepReport:
        w = r.whatif
        assert w.pending is not None, "a report is derived once"
        contains = {c.element: c.contains for c in w.candidates if c.contains}
        pending = w.pending.without(self._systematic.update(w.pending.deviations()))
        s, chained = self._on_timeline(r, pending)
        step = IdealStep(r.step, r.t0, r.t0 + w.observed_s, s.actual_s, s.ideal_s, r.ranks)
        if self.structural.wants_causes(step):
            s = pending.run(s.actual_s, s.ideal_s, chained)
            kept = pending.sharing(self._together[-1][1] if self._together else None)
            self._together.append((r.step, kept, chained.actual_before))
        structural = StructuralGains(s.ideal_s, s.gains(), s.extra(), s.contains, s.decomposed, s.actual_s)
        self.gains.append(StepGains(r.step, r.t0, w.step_s, w.baseline_s, r.ranks, w.gains(), contains, structural))
        self._blocking(step, out)
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
        out.rollups.extend(self._window_rollups(self._windows.add(r.t0, ((r.t0, w.observed_s, r.cost), step))))
        return replace(r, whatif=w.released())

    def _on_timeline(self, r: StepReport, p: Pending) -> tuple[Structural, Chained]:
        """The step's actual and ideal time on the job's timelines (:mod:`carry`), not decomposed yet; ``p``:
        its decomposition with the ideal from peers other than the job's systematically slow ranks."""
        w = r.whatif
        chained = self._timeline.chain(r.step, r.t0, p.g, p.owners)
        s = w.structural
        ideal_end, ideal_ranks = p.ideal_ends(chained.floor)  # (the what-if's are made when asked: not here)
        self._timeline.advance(r.step, r.t0, (s.actual_s, ideal_end), (w.rank_ends, ideal_ranks))
        actual, ideal = s.actual_s - chained.actual_before, ideal_end - chained.ideal_before
        return replace(s, actual_s=actual, ideal_s=ideal), chained

    def _blocking(self, step: IdealStep, out: Derived) -> None:
        """The step against its ideal: when it completes a persistent episode, a ``structural_slowdown``
        finding with its ranked causes over the episode."""
        found = self.structural.update(step)
        if found is not None:
            out.findings.append(found)
            episode = [g for g in self.gains if g.t0 >= found.start]
            together: dict[int, Together] = {n: partial(p.healed_together, before=b) for n, p, b in self._together}
            out.attributions.extend(structural_attributions(found.id, episode, together))
            self._together.clear()

    def _attribute(self, out: Derived, final: bool) -> None:
        for finding in list(self._unattributed):
            since = [g for g in self.gains if g.t0 >= finding.start]
            if len(since) < ATTRIBUTION_STEPS and not (final and since):
                continue
            self._unattributed.remove(finding)
            out.attributions.extend(element_attributions(finding.id, since))

    def _cascades(self, r: StepReport, out: Derived) -> None:
        root = cascade_root(r)
        for finding in [f for f in self._stragglers if root is not None and f.subjects[0] == root]:
            self._stragglers.remove(finding)
            found = cascade(finding, r)
            if found is not None:
                out.findings.append(found)

    def _regressions(self, out: Derived) -> None:
        for d in list(self._decisions):
            compared = windows(d, self.gains)
            if compared is None:
                continue
            self._decisions.remove(d)
            found = regression(d, *compared, self.graph)
            if found is not None:
                out.findings.append(found[0])
                out.attributions.extend(found[1])

    def _window_rollups(self, closed: list[list[StepRow]]) -> list[Rollup]:
        """The roll-ups of the windows of analysed steps that closed: waste and blocking slowdown, on the same
        boundaries (:class:`~streams.engine.rollup.Windows`: a window closes when an analysed step starts past
        it, or at the job's end — steps are analysed some steps after they ran, so event time cannot)."""
        return [r for rows in closed for r in (waste_rollups(self.job, [w for w, _ in rows])
                                                + blocking_rollups(self.job, [i for _, i in rows]))]  # fmt: skip
