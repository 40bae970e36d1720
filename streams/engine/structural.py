"""What the engine derives from a job's analysed steps, coordinated per job: attributions of its step-time
drift findings (:mod:`attribution`, once ``ATTRIBUTION_STEPS`` analysed steps follow the finding's start),
straggler cascades (:mod:`cascade`), control regressions (:mod:`regression`), critical-path shifts and
replica phase drift (:mod:`detectors`), and waste roll-ups per window of ``window`` steps (:mod:`waste`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from streams.engine.attribution import Attribution, StepGains, element_attributions
from streams.engine.cascade import cascade, cascade_root
from streams.engine.detectors.critical_path import CriticalPathShift, composition
from streams.engine.detectors.sync_loss import PhaseDrift
from streams.engine.findings import Finding
from streams.engine.opgraph import OperatorGraph
from streams.engine.regression import Decision, regression, windows
from streams.engine.rollup import Rollup
from streams.engine.steps import StepReport
from streams.engine.waste import WasteWindows

ATTRIBUTION_STEPS = 10
KEEP_STEPS = 512


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
    window_s: float = 600.0  # a waste roll-up window ends after ``window`` steps or this long, whichever first
    gains: deque[StepGains] = field(default_factory=lambda: deque(maxlen=KEEP_STEPS))
    _unattributed: list[Finding] = field(default_factory=list)
    _stragglers: list[Finding] = field(default_factory=list)
    _decisions: list[Decision] = field(default_factory=list)
    cp_shift: CriticalPathShift | None = None
    phase: PhaseDrift | None = None
    _waste: WasteWindows = field(init=False)

    def __post_init__(self) -> None:
        self._waste = WasteWindows(self.job, self.window, self.window_s)

    def on_finding(self, finding: Finding) -> None:
        """A finding of the job's detectors that wants structural follow-up."""
        if finding.kind == "step_time_drift":
            self._unattributed.append(finding)
        elif finding.kind == "straggler":
            self._stragglers.append(finding)

    def on_decision(self, decision_id: str, time: float, targets: tuple[str, ...]) -> None:
        self._decisions.append(Decision(decision_id, time, targets))

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
            out.rollups.extend(self._waste.add((r.t0, w.observed_s, r.cost)))
        self._attribute(out, final)
        self._regressions(out)
        if final:  # the end of the job: its partial window too
            out.rollups.extend(self._waste.flush())

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
