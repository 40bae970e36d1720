"""The engine: a short router over keyed state.

Keys are jobs (:class:`JobState`) and the control plane (:class:`ControlPlane`). The engine takes its input
as chunks in event-time order (:mod:`timeline`), sends each sample to the key it belongs to, and sends
what every key needs to all of them: decisions, and topology and power samples of no job. Keys share no
state, so the engine's state is the sum of theirs: :meth:`snapshot` / :meth:`restore` save and resume it,
and engines that split the jobs between them emit, together, what one engine emits (``shard``: each keeps
its share of the jobs; the samples of another engine's jobs feed only its control plane). Only the engine
that ``owns_control`` emits the control plane's findings (its state is kept everywhere, so ownership can
move).

A job is created by its first own sample (never by a decision) and closed, then evicted, when event time
passes its newest sample by ``job_idle_s``, or at the end of the input: its steps still waiting for later
ones are analysed then, as at the end of a file.
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from streams.contract.envelope import SampleBatch
from streams.engine import collector
from streams.engine.codes import classes
from streams.engine.control import ControlPlane, Relation
from streams.engine.job import JobState
from streams.engine.options import EngineConfig
from streams.engine.output import EngineOutput
from streams.engine.timeline import Chunk

__all__ = ["Engine", "EngineConfig", "EngineOutput"]
_T = TypeVar("_T")


@dataclass
class Engine:
    config: EngineConfig = field(default_factory=EngineConfig)
    owns_control: bool = True
    shard: tuple[int, int] = (0, 1)  # (index, count): this engine keeps the jobs whose key hash falls here
    jobs: dict[str, JobState] = field(default_factory=dict)
    control: ControlPlane = field(default_factory=ControlPlane)
    evicted: int = 0

    def process(self, chunk: Chunk) -> EngineOutput:
        out = EngineOutput()
        if chunk.decision is not None:
            self._decision(chunk.decision, out)
        for batch in chunk.batches:
            if batch.kind == "topology":
                with collector.paused():  # a large job's graph: a dict per node and edge
                    self._topology(batch, out)
            elif batch.kind == "op":
                for job, c in _by_job(batch):
                    if state := self._job(job, float(c["start"].min()), out):
                        state.ops(c, out)
            elif batch.kind == "step":
                for job, c in _by_job(batch):
                    if state := self._job(job, float(c["start"].min()), out):
                        state.step_summaries(c, out)
            elif batch.kind == "metric":
                self._metrics(batch, out)
        return out

    def advance(self, time: float) -> EngineOutput:
        """Event time reached ``time``: close and evict the jobs idle for ``job_idle_s`` by then."""
        out = EngineOutput()
        for job in sorted(self.jobs):
            self.jobs[job].due(time, out)
        idle = [j for j, s in self.jobs.items() if s.last_time + self.config.job_idle_s < time]
        for job in sorted(idle):
            self.jobs.pop(job).close(out)
            self.evicted += 1
        return out

    def close(self) -> EngineOutput:
        """The end of the input: close and evict every job."""
        out = EngineOutput()
        for job in sorted(self.jobs):
            self.jobs.pop(job).close(out)
            self.evicted += 1
        return out

    def snapshot(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def restore(data: bytes) -> Engine:
        return unpickled(data, Engine, "an engine snapshot")

    def owns(self, job: str) -> bool:
        index, count = self.shard
        return count == 1 or zlib.crc32(job.encode()) % count == index

    def _job(self, job: str, at: float, out: EngineOutput) -> JobState | None:
        """The job's state (created by its first own sample), or None when another engine keeps the job."""
        if not job or not self.owns(job):
            return None
        state = self.jobs.get(job)
        if state is None:
            state = self.jobs[job] = JobState(job, self.config)
            if self.control.shared:
                state.shared_topology(list(self.control.shared), at, out)
        return state

    def _decision(self, decision: dict[str, Any], out: EngineOutput) -> None:
        self.control.decision(decision)
        for job in sorted(self.jobs):
            self.jobs[job].decision(decision, out)

    def _topology(self, batch: SampleBatch, out: EngineOutput) -> None:
        c = batch.columns
        at = float(np.max(c["time"]))
        relations: list[tuple[str, Relation]] = list(zip(
            c["job"].tolist(), zip(c["relation"].tolist(), c["src"].tolist(), c["dst"].tolist(), strict=True),
            strict=True))  # fmt: skip
        shared = [r for j, r in relations if not j]
        self.control.topology(shared)
        if shared:
            for job in sorted(self.jobs):
                self.jobs[job].shared_topology(shared, at, out)
        by_job: dict[str, list[Relation]] = {}
        for j, r in relations:
            if j:
                by_job.setdefault(j, []).append(r)
        for job in sorted(by_job):
            if state := self._job(job, at, out):
                state.topology(by_job[job], at, out)

    def _metrics(self, batch: SampleBatch, out: EngineOutput) -> None:
        for job, cols in _by_job(batch):
            if job:
                if state := self._job(job, float(cols["time"].min()), out):
                    state.metrics(cols, out)
                continue
            self._control(lambda o, cols=cols: self.control.metrics(cols, o), out)
            p = cols["name"] == "power_w"
            rows = list(zip(cols["entity"][p].tolist(), cols["time"][p].tolist(), cols["value"][p].tolist(),
                            strict=True))  # fmt: skip
            for name in sorted(self.jobs) if rows else ():
                self.jobs[name].shared_power(rows)

    def _control(self, act: Any, out: EngineOutput) -> None:
        """Run ``act`` on the control plane; keep what it emits only where this engine owns the control plane."""
        emitted = EngineOutput()
        act(emitted)
        if self.owns_control:
            out.extend(emitted)


def unpickled(data: bytes, kind: type[_T], what: str) -> _T:
    """``data`` unpickled, refused (TypeError) unless it is a ``kind``."""
    found = pickle.loads(data)
    if not isinstance(found, kind):
        raise TypeError(f"not {what}")
    return found


def _by_job(batch: SampleBatch) -> list[tuple[str, dict[str, Any]]]:
    """The batch's columns per job ('' for samples of no job), jobs in sorted order, rows in batch order."""
    column = batch.columns["job"]
    if len(column) and (classes(column, (column[0],)) == 1).all():  # one job (the usual batch): no set of texts
        return [(str(column[0]), batch.columns)]
    jobs = [str(j) for j in column.tolist()]
    names = sorted(set(jobs))
    number = {name: i for i, name in enumerate(names)}
    inverse = np.fromiter(map(number.__getitem__, jobs), np.int64, len(jobs))
    return [(name, {k: v[inverse == i] for k, v in batch.columns.items()}) for i, name in enumerate(names)]
