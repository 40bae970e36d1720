"""The engine: routes validated sample batches to per-job state and collects what the detectors find."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.contract.envelope import SampleBatch
from streams.engine.detectors.coherence import ControlCoherence
from streams.engine.detectors.rerun import Reruns, lost_share
from streams.engine.detectors.step_time import StepObs, StepTimeDrift
from streams.engine.detectors.straggler import CollectiveLateness
from streams.engine.detectors.sync_loss import SyncLoss
from streams.engine.findings import Finding
from streams.engine.opgraph import GraphSnapshot, OperatorGraph
from streams.engine.rollup import Rollup, StepWindow
from streams.engine.services import Services, restart_causes
from streams.engine.steps import JobSteps, StepReport
from streams.engine.structural import Attribution, Derived, JobDerivations

MAX_POWER_GAP_S = 60.0
KEEP_STEPS = 8  # steps of per-rank compute kept to name the root of a late collective


@dataclass(frozen=True)
class EngineConfig:
    step_drift_warmup: int = 20
    step_drift_threshold: float = 0.10
    rollup_steps: int = 50
    price_per_accel_hour: float = 0.0


@dataclass
class EngineOutput:
    findings: list[Finding] = field(default_factory=list)
    rollups: list[Rollup] = field(default_factory=list)
    attributions: list[Attribution] = field(default_factory=list)
    snapshots: list[GraphSnapshot] = field(default_factory=list)
    reports: list[StepReport] = field(default_factory=list)  # analysed steps (not audit records themselves)

    def add(self, derived: Derived) -> None:
        self.findings.extend(derived.findings)
        self.attributions.extend(derived.attributions)
        self.rollups.extend(derived.rollups)


@dataclass
class Engine:
    """Holds per-job detector state. Steps of a job are taken in arrival order; a step at or before the
    last one seen for that job (a re-sent or late step) is ignored and counted in ``stale_steps``."""

    config: EngineConfig = field(default_factory=EngineConfig)
    stale_steps: int = 0
    _step_detectors: dict[str, StepTimeDrift] = field(default_factory=dict)
    _last_step: dict[str, int] = field(default_factory=dict)
    _windows: dict[str, StepWindow] = field(default_factory=dict)
    _stragglers: dict[str, CollectiveLateness] = field(default_factory=dict)
    _placement: dict[str, dict[int, str]] = field(default_factory=dict)  # job -> rank -> node element id
    _device_node: dict[str, str] = field(default_factory=dict)
    _rank_device: dict[tuple[str, int], str] = field(default_factory=dict)
    _compute: dict[str, dict[int, dict[int, float]]] = field(default_factory=dict)  # job -> step -> rank -> s
    _position: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)  # job -> rank -> (pp, tp)
    _steps: dict[str, JobSteps] = field(default_factory=dict)
    _derived: dict[str, JobDerivations] = field(default_factory=dict)
    _graphs: dict[str, OperatorGraph] = field(default_factory=dict)
    _ranks_seen: dict[str, set[int]] = field(default_factory=dict)
    _sync: dict[str, SyncLoss] = field(default_factory=dict)
    _services: Services = field(default_factory=Services)
    _coherence: ControlCoherence | None = None
    _reruns: dict[str, Reruns] = field(default_factory=dict)
    _power: dict[str, tuple[float, float]] = field(default_factory=dict)  # entity -> (time, watts) last seen

    def process(self, batches: Iterable[SampleBatch]) -> EngineOutput:
        out = EngineOutput()
        for batch in batches:
            if batch.kind == "step":
                self._on_steps(batch, out)
            elif batch.kind == "op":
                self._on_ops(batch, out)
            elif batch.kind == "topology":
                self._on_topology(batch, out)
            elif batch.kind == "metric":
                self._on_metrics(batch, out)
        return out

    def decision(self, decision: dict[str, Any]) -> EngineOutput:
        """A control decision: its controller joins the operator graph of its job (or of every job whose
        graph holds one of its targets), and a regression check waits for the steps after it."""
        out = EngineOutput()
        self._services.decision(decision)
        if self._coherence is None:
            self._coherence = ControlCoherence(related=self._placed)
        out.findings.extend(self._coherence.update(decision))
        targets = tuple(decision["targets"])
        jobs = [decision["job"]] if decision.get("job") else [
            j for j, g in self._graphs.items() if any(g.graph.has_node(t) for t in targets)]  # fmt: skip
        for job in jobs:
            graph = self._graph(job)
            graph.add_decision(decision["id"], decision["controller"], targets)
            self._derivations(job).on_decision(decision["id"], float(decision["time"]), targets)
            self._snapshot(job, float(decision["time"]), out)
        return out

    def flush(self) -> EngineOutput:
        """Analyse every step still waiting for later ones (end of a file or a replay)."""
        out = EngineOutput()
        for job, steps in self._steps.items():
            self._on_reports(job, steps.flush(), out, final=True)
        return out

    def _window(self, job: str) -> StepWindow:
        window = self._windows.get(job)
        if window is None:
            window = self._windows[job] = StepWindow(job, self.config.rollup_steps, self.config.price_per_accel_hour)
        return window

    def _on_metrics(self, batch: SampleBatch, out: EngineOutput) -> None:
        """Service metrics go to the serving detectors (:mod:`services`). Power samples (``power_w``, per
        device or node) are integrated into each job's energy: a sample's value holds until the entity's
        next sample (gaps over ``MAX_POWER_GAP_S`` are not counted). The job: the sample's own, else every
        job whose operator graph holds the entity."""
        c = batch.columns
        rows = zip(c["entity"].tolist(), c["name"].tolist(), c["value"].tolist(), c["time"].tolist(), strict=True)
        findings, attributions = self._services.metrics(rows)
        out.findings.extend(findings)
        out.attributions.extend(attributions)
        p = c["name"] == "power_w"
        samples = zip(c["job"][p].tolist(), c["entity"][p].tolist(), c["value"][p].tolist(), c["time"][p].tolist(),
                      strict=True)  # fmt: skip
        for job, entity, value, t in samples:
            if self._coherence is not None and not entity.startswith("device:"):
                self._coherence.power(entity, t, value)
            last = self._power.get(entity)
            self._power[entity] = (t, value)
            if last is None or not 0 < t - last[0] <= MAX_POWER_GAP_S:
                continue
            jobs = [job] if job else [j for j, g in self._graphs.items() if g.graph.has_node(entity)]
            for j in jobs:
                self._window(j).add_energy(last[1] * (t - last[0]))

    def _placed(self, target: str, element: str) -> bool:
        """Whether some job's operator graph places ``element`` on ``target``."""
        return any(g.hosts(target, element) for g in self._graphs.values())

    def _graph(self, job: str) -> OperatorGraph:
        graph = self._graphs.get(job)
        if graph is None:
            graph = self._graphs[job] = OperatorGraph(job)
        return graph

    def _derivations(self, job: str) -> JobDerivations:
        d = self._derived.get(job)
        if d is None:
            d = self._derived[job] = JobDerivations(job, self._graph(job), window=self.config.rollup_steps)
        return d

    def _snapshot(self, job: str, at: float, out: EngineOutput) -> None:
        out.snapshots.extend(self._graph(job).snapshot(at))

    def _on_reports(self, job: str, reports: list[StepReport], out: EngineOutput, final: bool = False) -> None:
        derived = Derived()
        self._derivations(job).on_reports(reports, derived, final)
        out.add(derived)
        out.reports.extend(reports)

    def _findings(self, job: str, findings: list[Finding], out: EngineOutput) -> None:
        derivations = self._derivations(job)
        for f in findings:
            derivations.on_finding(f)
        out.findings.extend(findings)

    def _on_topology(self, batch: SampleBatch, out: EngineOutput) -> None:
        """Remember where ranks run (rank → device → node), to name the node of a straggler; and add the
        relations to the operator graph of their job."""
        c = batch.columns
        by_job: dict[str, list[tuple[str, str, str]]] = {}
        for job, relation, src, dst in zip(c["job"], c["relation"], c["src"], c["dst"], strict=True):
            by_job.setdefault(job or "", []).append((relation, src, dst))
        at = float(np.max(c["time"])) if len(c["time"]) else 0.0
        shared = by_job.pop("", [])  # relations of no job (e.g. device → node) belong to every job's graph
        for job in sorted(set(by_job) | (set(self._graphs) if shared else set())):
            self._graph(job).add_relations(by_job.get(job, []) + shared)
            self._snapshot(job, at, out)
        for relation, src, dst in zip(c["relation"], c["src"], c["dst"], strict=True):
            if relation != "placed_on":
                continue
            if src.startswith("rank:") and "/" in src:
                job, _, rank = src[5:].rpartition("/")
                if rank.isdigit():
                    self._rank_device[(job, int(rank))] = dst
            elif src.startswith("device:") and dst.startswith("node:"):
                self._device_node[src] = dst
        for (job, rank), device in self._rank_device.items():
            node = self._device_node.get(device)
            if node is not None:
                self._placement.setdefault(job, {})[rank] = node

    def _on_ops(self, batch: SampleBatch, out: EngineOutput) -> None:
        c = batch.columns
        self._add_compute(c)
        for job in sorted(set(c["job"].tolist())):
            rows = c["job"] == job
            steps = self._steps.get(job)
            if steps is None:
                steps = self._steps[job] = JobSteps(job)
            if self._add_ranks(job, c, rows):
                self._snapshot(job, float(c["start"][rows].min()), out)
            sync = self._sync.get(job)
            if sync is None:
                sync = self._sync[job] = SyncLoss(job)
            lost = sync.update(c["rank"][rows], c["step"][rows], c["dp"][rows], float(c["start"][rows].max()))
            if lost is not None:
                self._findings(job, [lost], out)
            self._on_reports(job, steps.add(c["step"][rows], {k: v[rows] for k, v in c.items()}), out)
        # communication collectives (all-reduce, ...): sync barriers are judged on the step's dependency graph
        collective = (c["seq"] >= 0) & (c["group"] != "") & (c["op_class"] == "comm")
        if not collective.any():
            return
        jobs = c["job"][collective]
        for job in sorted(set(jobs.tolist())):
            rows = np.flatnonzero(collective)[jobs == job]
            detector = self._stragglers.get(job)
            if detector is None:
                detector = self._stragglers[job] = CollectiveLateness(
                    job, placement=self._placement.setdefault(job, {}), root_of=functools.partial(self._root, job)
                )
            found = detector.update(
                c["group"][rows],
                c["seq"][rows],
                c["step"][rows],
                c["rank"][rows],
                c["start"][rows],
                c["duration"][rows],
            )
            self._findings(job, found, out)

    def _add_ranks(self, job: str, c: dict[str, Any], rows: Any) -> bool:
        """Ranks not seen before join the job's operator graph; whether there were any."""
        seen = self._ranks_seen.setdefault(job, set())
        ranks = c["rank"][rows]
        new = ~np.isin(ranks, np.fromiter(seen, np.int64, len(seen)))
        if new.any():
            idx = np.flatnonzero(rows)[new]
            positions = {int(r): (int(d), int(p), int(t)) for r, d, p, t in zip(
                c["rank"][idx], c["dp"][idx], c["pp"][idx], c["tp"][idx], strict=True)}  # fmt: skip
            seen.update(positions)
            self._graph(job).add_ranks(positions)
        return bool(new.any())

    def _add_compute(self, c: dict[str, Any]) -> None:
        """Sum each rank's own compute per step (kept for the last few steps), and where each rank sits."""
        mask = c["op_class"] == "compute"
        if not mask.any():
            return
        jobs, steps, ranks = c["job"][mask], c["step"][mask], c["rank"][mask]
        for job in sorted(set(jobs.tolist())):
            rows = jobs == job
            key = steps[rows] * (int(ranks[rows].max()) + 1) + ranks[rows]
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            sums = np.bincount(inverse.ravel(), c["duration"][mask][rows])
            idx = np.flatnonzero(mask)[np.flatnonzero(rows)[first]]
            per_step = self._compute.setdefault(job, {})
            position = self._position.setdefault(job, {})
            for step, rank, pp, tp, total in zip(c["step"][idx].tolist(), c["rank"][idx].tolist(),
                                                 c["pp"][idx].tolist(), c["tp"][idx].tolist(), sums.tolist(),
                                                 strict=True):  # fmt: skip
                per_rank = per_step.get(step)
                if per_rank is None:
                    per_rank = per_step[step] = {}
                    for old in [s for s in per_step if s < step - KEEP_STEPS]:
                        del per_step[old]
                per_rank[rank] = per_rank.get(rank, 0.0) + total
                position[rank] = (pp, tp)

    def _root(self, job: str, step: int) -> int | None:
        """The rank whose compute in ``step`` most exceeds the median of its position's peers (>5%)."""
        per_rank = self._compute.get(job, {}).get(step)
        if not per_rank:
            return None
        position = self._position[job]
        by_position: dict[tuple[int, int], list[float]] = {}
        for rank, total in per_rank.items():
            by_position.setdefault(position[rank], []).append(total)
        medians = {p: float(np.median(v)) for p, v in by_position.items()}
        excess = {r: t / medians[position[r]] for r, t in per_rank.items() if medians[position[r]] > 0}
        root = max(sorted(excess), key=excess.__getitem__, default=None)
        return root if root is not None and excess[root] > 1.05 else None

    def _on_steps(self, batch: SampleBatch, out: EngineOutput) -> None:
        c = batch.columns
        rows = zip(c["job"], c["step"].tolist(), c["start"].tolist(), c["duration"].tolist(),
                   c["output_units"].tolist(), c["accelerators"].tolist(), c["attempts"].tolist(),
                   c["status"].tolist(), strict=True)  # fmt: skip
        for job, step, start, duration, output_units, accelerators, attempts, status in rows:
            obs = StepObs(job, step, start, duration)
            window = self._window(job)
            stale = obs.step <= self._last_step.get(obs.job, -1)
            reruns = self._reruns.get(job)
            if reruns is None:
                reruns = self._reruns[job] = Reruns(job)
            rerun = reruns.update(step, stale, status, attempts, start, duration * accelerators)
            if rerun is not None:
                self._findings(job, [rerun], out)
                out.attributions.extend(restart_causes(rerun, self._services.decisions))
            window.add_rerun(duration * accelerators * lost_share(stale, status, attempts))
            if stale:
                self.stale_steps += 1  # a re-run (after a restart) or a re-sent summary
                continue
            self._last_step[obs.job] = obs.step
            out.rollups.extend(window.add(start, duration, output_units, accelerators))
            detector = self._step_detectors.get(obs.job)
            if detector is None:
                detector = StepTimeDrift(
                    obs.job, warmup=self.config.step_drift_warmup, threshold=self.config.step_drift_threshold
                )
                self._step_detectors[obs.job] = detector
            finding = detector.update(obs)
            if finding is not None:
                self._findings(job, [finding], out)
