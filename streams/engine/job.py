"""The state of one job (a key of the engine): its steps, operator graph, detectors and roll-ups.

A job's state changes only through events: its own samples, and what every key receives (decisions, and
the fabric's topology and power samples that belong to no job). It holds no reference to another key's
state, so it can be snapshotted, restored and moved on its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.engine import collector, elements
from streams.engine import series as named_series
from streams.engine.codes import classes
from streams.engine.compute import RankCompute
from streams.engine.detectors.changepoint import ChangePoint
from streams.engine.detectors.coherence import ControlCoherence
from streams.engine.detectors.rerun import Reruns, lost_share
from streams.engine.detectors.series_drift import SeriesDrift
from streams.engine.detectors.step_time import StepObs, StepTimeDrift
from streams.engine.detectors.straggler import CollectiveLateness
from streams.engine.detectors.sync_loss import SyncLoss
from streams.engine.economics import Accelerators
from streams.engine.findings import Finding
from streams.engine.opgraph import OperatorGraph
from streams.engine.options import EngineConfig
from streams.engine.output import EngineOutput
from streams.engine.rollup import Rollup, StepWindow
from streams.engine.services import Services, restart_causes
from streams.engine.steps import JobSteps, StepReport
from streams.engine.structural import Derived, JobDerivations

MAX_POWER_GAP_S = 60.0

Relation = tuple[str, str, str]  # (relation, src, dst) of a topology sample


@dataclass
class JobState:
    job: str
    config: EngineConfig
    last_time: float = -math.inf  # newest event time of the job's own samples
    stale_steps: int = 0
    _last_step: int = -1
    window: StepWindow = field(init=False)
    steps: JobSteps = field(init=False)
    graph: OperatorGraph = field(init=False)
    derived: JobDerivations = field(init=False)
    stragglers: CollectiveLateness = field(init=False)
    sync: SyncLoss = field(init=False)
    reruns: Reruns = field(init=False)
    step_time: StepTimeDrift = field(init=False)
    services: Services = field(default_factory=Services)
    series: SeriesDrift = field(init=False)
    coherence: ControlCoherence = field(init=False)
    accelerators: Accelerators = field(init=False)
    _ranks_seen: set[int] = field(default_factory=set)
    _rank_device: dict[int, str] = field(default_factory=dict)
    _device_node: dict[str, str] = field(default_factory=dict)
    _power: dict[str, tuple[float, float]] = field(default_factory=dict)  # entity -> (time, watts) last seen

    def __post_init__(self) -> None:
        job, cfg = self.job, self.config
        self.window = StepWindow(job, cfg.rollup_steps, cfg.price_per_accel_hour, cfg.rollup_window_s)
        self.steps = JobSteps(job)
        self.graph = OperatorGraph(job)
        self.derived = JobDerivations(job, self.graph, window=cfg.rollup_steps, window_s=cfg.rollup_window_s,
                                      structural_threshold=cfg.structural_slowdown_threshold)  # fmt: skip
        self.stragglers = CollectiveLateness(job, compute=RankCompute())
        self.sync = SyncLoss(job)
        self.reruns = Reruns(job)
        self.step_time = StepTimeDrift(job, warmup=cfg.step_drift_warmup, threshold=cfg.step_drift_threshold)
        self.coherence = ControlCoherence(job=job)
        self.series = SeriesDrift(warn_on=named_series.WARN_ON, job=job, min_change=cfg.step_drift_threshold,
                                  detector=ChangePoint(every=cfg.series_every))  # fmt: skip
        self.accelerators = Accelerators(job)

    # -- what every key receives -------------------------------------------------------------------

    def shared_topology(self, relations: list[Relation], at: float, out: EngineOutput) -> None:
        """Relations of no job (device → node, node → switch): part of every job's graph."""
        self.graph.add_relations(relations)
        self._place(relations)
        self.accelerators.relations(relations)
        out.snapshots.extend(self.graph.snapshot(at))

    def shared_power(self, rows: Iterable[tuple[str, float, float]]) -> None:
        """``power_w`` samples of no job, (entity, time, watts): counted when the job's graph holds the entity."""
        self._power_samples([(e, t, w) for e, t, w in rows if self.graph.graph.has_node(e)])

    def decision(self, decision: dict[str, Any], out: EngineOutput) -> None:
        """Every decision: kept for naming causes; one for this job (or touching its operator graph) is
        judged for conflicts with the other controllers acting on the job (:mod:`detectors.coherence`, on
        the job's graph), joins the graph, and a regression check waits for the steps after it."""
        self.services.decision(decision)
        targets = tuple(decision["targets"])
        if decision.get("job"):
            if decision["job"] != self.job:
                return
        elif not any(self.graph.graph.has_node(t) for t in targets):
            return
        at = float(decision["time"])
        self._findings(self.coherence.update(decision, self.graph), out)
        self.graph.add_decision(decision["id"], decision["controller"], targets)
        self.derived.on_decision(decision["id"], at, targets)
        out.snapshots.extend(self.graph.snapshot(at))

    # -- the job's own samples ---------------------------------------------------------------------

    def topology(self, relations: list[Relation], at: float, out: EngineOutput) -> None:
        self.last_time = max(self.last_time, at)
        self.graph.add_relations(relations)
        self._place(relations)
        self.accelerators.relations(relations)
        out.snapshots.extend(self.graph.snapshot(at))

    def ops(self, c: dict[str, Any], out: EngineOutput) -> None:
        """Op span columns of this job, in canonical order."""
        self.last_time = max(self.last_time, float(c["start"].max()))
        self.stragglers.spans(c)
        with collector.paused():  # new ranks' edges in the graph (two dicts per rank) and the snapshot's tuples
            if self._add_ranks(c):
                out.snapshots.extend(self.graph.snapshot(float(c["start"].min())))
        lost = self.sync.update(c["rank"], c["step"], c["dp"], float(c["start"].max()))
        if lost is not None:
            self._findings([lost], out)
        self._on_reports(self.steps.add(c["step"], c), out)
        # communication collectives (all-reduce, ...): sync barriers are judged on the step's dependency graph
        # every call, rows or not: later steps complete earlier ones' collectives
        rows = (c["seq"] >= 0) & (classes(c["group"], ("",)) == 0) & (classes(c["op_class"], ("comm",)) == 1)
        found = self.stragglers.update(
            c["group"][rows], c["seq"][rows], c["step"][rows], c["rank"][rows], c["start"][rows],
            c["duration"][rows],
        )  # fmt: skip
        self._findings(found, out)

    def step_summaries(self, c: dict[str, Any], out: EngineOutput) -> None:
        rows = zip(c["step"].tolist(), c["start"].tolist(), c["duration"].tolist(), c["output_units"].tolist(),
                   c["accelerators"].tolist(), c["attempts"].tolist(), c["status"].tolist(), strict=True)  # fmt: skip
        outputs: list[tuple[float, float]] = []
        for step, start, duration, output_units, given, attempts, status in rows:
            self.last_time = max(self.last_time, start)
            self.accelerators.summary(step, given)
            accelerators = self.accelerators.count(step, self._ranks_seen)  # given 0 (unknown): the job's known count
            stale = step <= self._last_step
            rerun = self.reruns.update(step, stale, status, attempts, start, duration * accelerators)
            if rerun is not None:
                self._findings([rerun], out)
                out.attributions.extend(restart_causes(rerun, self.services.decisions))
            self.window.add_rerun(duration * accelerators * lost_share(stale, status, attempts))
            if stale:
                self.stale_steps += 1  # a re-run (after a restart) or a re-sent summary
                continue
            self._last_step = step
            self.window.add(start, duration, output_units, accelerators, step)
            finding = self.step_time.update(StepObs(self.job, step, start, duration))
            if finding is not None:
                self._findings([finding], out)
            outputs.append((start, output_units))
        self._series(named_series.of_steps(self.job, outputs), out)

    def metrics(self, c: dict[str, Any], out: EngineOutput) -> None:
        """Service metrics go to the serving detectors (:mod:`services`); the job's ``power_w`` samples to
        its energy: a sample's value holds until the entity's next sample (gaps over ``MAX_POWER_GAP_S``
        are not counted)."""
        entity, name, value, time = c["entity"], c["name"], c["value"], c["time"]
        self.last_time = max(self.last_time, float(time.max()))
        findings, attributions = self.services.metrics(zip(entity.tolist(), name.tolist(), value.tolist(),
                                                           time.tolist(), strict=True))  # fmt: skip
        out.findings.extend(findings)
        out.attributions.extend(attributions)
        power = np.flatnonzero(name == "power_w")
        self._power_samples(list(zip(entity[power].tolist(), time[power].tolist(), value[power].tolist(),
                                     strict=True)))  # fmt: skip
        self._series(named_series.of_metrics(entity, name, value, time), out)

    def close(self, out: EngineOutput) -> None:
        """The end of the job's input (end of a file or replay, or idle past the eviction period): analyse
        every step still waiting for later ones."""
        self._findings(self.stragglers.flush(), out)  # first: a straggler's cascade is read from the last steps
        self.stragglers.release()
        rollups = self.window.flush()  # (of the step summaries, not of the reports analysed below)
        # the series of these roll-ups are the last to get samples: the others' state goes before the steps'
        # graphs are made (a large job's peak)
        self.series.keep(named_series.of_rollups(rollups)[0])
        self._on_reports(self.steps.flushing(), out, final=True)  # one step at a time (one graph alive)
        self._rollups(rollups, out)
        self._findings(self.series.flush(), out)

    def due(self, time: float, out: EngineOutput) -> None:
        """Event time reached ``time``: the windows that ended by then."""
        self._rollups(self.window.due(time), out)

    def _rollups(self, rollups: list[Rollup], out: EngineOutput) -> None:
        out.rollups.extend(rollups)
        if rollups:
            self._series(named_series.of_rollups(rollups), out)

    def _series(self, found: named_series.Series, out: EngineOutput) -> None:
        """Series of the job to the series-drift detector (``series_drift``, ``early_warning`` findings)."""
        keys, times, values = found
        if keys:
            self._findings(self.series.update(keys, times, values), out)

    # -- internals -----------------------------------------------------------------------------------

    def _power_samples(self, rows: list[tuple[str, float, float]]) -> None:
        """``power_w`` (entity, time, watts) of the job: its energy (a reading holds until the entity's
        next one), and the power of racks and nodes (not single devices) for the energy-feedback-loop check."""
        device = elements.prefix("device")  # (is_kind, without two calls a row)
        held = []
        for entity, t, watts in rows:
            if not entity.startswith(device):
                self.coherence.power(entity, t, watts)
            last = self._power.get(entity)
            self._power[entity] = (t, watts)
            if last is not None and 0 < t - last[0] <= MAX_POWER_GAP_S:
                held.append((last[0], t, last[1]))
        if held:
            self.window.add_energy(held)

    def _place(self, relations: list[Relation]) -> None:
        """Remember where ranks run (rank → device → node), to name the node of a straggler."""
        for relation, src, dst in relations:
            if relation != "placed_on":
                continue
            rank = elements.parse_of_job(src, "rank")
            if rank is not None and rank[0] == self.job:
                self._rank_device[rank[1]] = dst
            elif elements.is_kind(src, "device") and elements.is_kind(dst, "node"):
                self._device_node[src] = dst
        for r, device in self._rank_device.items():
            node = self._device_node.get(device)
            if node is not None:
                self.stragglers.place(r, node)

    def _add_ranks(self, c: dict[str, Any]) -> bool:
        """Ranks not seen before join the job's operator graph; whether there were any."""
        seen = self._ranks_seen
        low, high = int(c["rank"].min()), int(c["rank"].max())
        if high - low < len(seen) and all(r in seen for r in range(low, high + 1)):
            return False  # every rank from the lowest to the highest seen before (the usual batch)
        if high - low <= 4 * len(c["rank"]) and seen.issuperset(
            (np.flatnonzero(np.bincount(c["rank"] - low)) + low).tolist()
        ):  # every rank of the batch seen before, some between them not (a job traced on some of its ranks)
            return False
        new = ~np.isin(c["rank"], np.fromiter(seen, np.int64, len(seen)))
        if not new.any():
            return False
        idx = np.flatnonzero(new)
        # one row per new rank: ranks in the order they first appear, each with its last row's position
        _, first = np.unique(c["rank"][idx], return_index=True)
        _, from_end = np.unique(c["rank"][idx][::-1], return_index=True)
        rows = idx[(len(idx) - 1 - from_end)[np.argsort(first, kind="stable")]]
        positions = {r: (d, p, t) for r, d, p, t in zip(*(c[k][rows].tolist() for k in ("rank", "dp", "pp", "tp")),
                                                       strict=True)}  # fmt: skip
        seen.update(positions)
        self.graph.add_ranks(positions)
        return True

    def _on_reports(self, reports: Iterable[StepReport], out: EngineOutput, final: bool = False) -> None:
        derived = Derived()
        costed = map(self.accelerators.costed, reports)  # partial tracing: the job's real count
        out.reports.extend(self.derived.on_reports(costed, derived, final))
        out.add(derived)

    def _findings(self, findings: list[Finding], out: EngineOutput) -> None:
        for f in findings:
            self.derived.on_finding(f)
        out.findings.extend(findings)
