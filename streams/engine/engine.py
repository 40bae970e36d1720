"""The engine: routes validated sample batches to per-job state and collects what the detectors find."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.contract.envelope import SampleBatch
from streams.engine.detectors.step_time import StepObs, StepTimeDrift
from streams.engine.detectors.straggler import CollectiveLateness
from streams.engine.findings import Finding
from streams.engine.rollup import Rollup, StepWindow

KEEP_STEPS = 8  # steps of per-rank compute kept to name the root of a late collective


@dataclass(frozen=True)
class EngineConfig:
    step_drift_warmup: int = 20
    step_drift_threshold: float = 0.10
    rollup_steps: int = 50


@dataclass
class EngineOutput:
    findings: list[Finding] = field(default_factory=list)
    rollups: list[Rollup] = field(default_factory=list)


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

    def process(self, batches: Iterable[SampleBatch]) -> EngineOutput:
        out = EngineOutput()
        for batch in batches:
            if batch.kind == "step":
                self._on_steps(batch, out)
            elif batch.kind == "op":
                self._on_ops(batch, out)
            elif batch.kind == "topology":
                self._on_topology(batch)
        return out

    def _on_topology(self, batch: SampleBatch) -> None:
        """Remember where ranks run (rank → device → node), to name the node of a straggler."""
        c = batch.columns
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
        collective = (c["seq"] >= 0) & (c["group"] != "") & ((c["op_class"] == "comm") | (c["op_class"] == "sync"))
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
            out.findings.extend(found)

    def _add_compute(self, c: dict[str, Any]) -> None:
        """Sum each rank's own compute per step (kept for the last few steps), and where each rank sits."""
        mask = c["op_class"] == "compute"
        for job, step, rank, pp, tp, dur in zip(
            c["job"][mask].tolist(), c["step"][mask].tolist(), c["rank"][mask].tolist(), c["pp"][mask].tolist(),
            c["tp"][mask].tolist(), c["duration"][mask].tolist(), strict=True,
        ):  # fmt: skip
            steps = self._compute.setdefault(job, {})
            per_rank = steps.get(step)
            if per_rank is None:
                per_rank = steps[step] = {}
                for old in [s for s in steps if s < step - KEEP_STEPS]:
                    del steps[old]
            per_rank[rank] = per_rank.get(rank, 0.0) + dur
            self._position.setdefault(job, {})[rank] = (pp, tp)

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
                   c["output_units"].tolist(), c["accelerators"].tolist(), strict=True)  # fmt: skip
        for job, step, start, duration, output_units, accelerators in rows:
            obs = StepObs(job, step, start, duration)
            if obs.step <= self._last_step.get(obs.job, -1):
                self.stale_steps += 1
                continue
            self._last_step[obs.job] = obs.step
            window = self._windows.get(job)
            if window is None:
                window = self._windows[job] = StepWindow(job, self.config.rollup_steps)
            out.rollups.extend(window.add(start, duration, output_units, accelerators))
            detector = self._step_detectors.get(obs.job)
            if detector is None:
                detector = StepTimeDrift(
                    obs.job, warmup=self.config.step_drift_warmup, threshold=self.config.step_drift_threshold
                )
                self._step_detectors[obs.job] = detector
            finding = detector.update(obs)
            if finding is not None:
                out.findings.append(finding)
