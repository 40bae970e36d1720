"""A training scenario: a fabric run step by step into telemetry and decisions, and its ground truth.

The runner carries what spans steps:

- the **phase** of a replica that lost synchronisation (``sync_loss``): it starts each step when it
  finished its own last one, not when the quorum did, so its spans drift further from the rest each step;
- a **checkpoint-restart** (``Restart``): a node fails part-way through a step, the job is restarted by
  its orchestrator (a decision) from the last checkpoint on a spare node after a delay, and the steps since
  that checkpoint run again (step summaries: the failed attempt ``status: failed``, the re-runs
  ``attempts: 2, status: restarted``; new ``source`` names for the restarted processes);
- **power caps** that decisions put on nodes (they clamp the power of that node's devices);
- the **cascade** of a straggler: per step, which ranks the root makes late (see ``Cascade``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.sim.base import T0, Message, cause, decision, envelope
from streams.sim.emit import GPUS_PER_NODE, placement, stage_devices, step_messages, topology
from streams.sim.sizing import sized_envelopes
from streams.sim.training import Array, Cause, StepTimes, TrainingFabric

ELEMENT = {
    "straggler_rank": "rank:{job}/{target}",
    "slow_stage": "stage:{job}/{target}",
    "slow_link": "link:{job}/stage{target}-stage{next}",
    "imbalanced_dp": "dp:{job}/{target}",
    "sync_loss": "dp:{job}/{target}",
}
TOKENS_PER_MICROBATCH = 8192


@dataclass(frozen=True)
class Restart:
    """Node ``node`` fails ``fail_fraction`` into step ``failed_step``; checkpoints are taken every
    ``checkpoint_every`` steps, so the job resumes at the last multiple of it, ``delay_s`` after the failure
    (detection, rescheduling onto the spare node, loading the checkpoint)."""

    failed_step: int
    node: int
    spare: int
    checkpoint_every: int
    fail_fraction: float = 0.6
    delay_s: float = 90.0

    @property
    def resume_step(self) -> int:
        return self.failed_step // self.checkpoint_every * self.checkpoint_every


@dataclass
class Cascade:
    """Which ranks a root cause makes late. Per step, compare the run with the run where the root alone is
    healed (same noise): a (replica, stage) position is *affected* when its arrival at its data-parallel
    all-reduce moves by more than ``threshold`` × the healed step time (the root's tensor-parallel peers,
    through tp_sync, and its replica's other stages, through send/recv), and *waiting* when it is not late
    itself but waits that much longer at the all-reduce (the other replicas, through the barrier). A rank
    counts when its position is so in at least half of the root's active steps; the root is not listed."""

    root: Cause
    threshold: float = 0.01
    steps: int = 0
    late: Array | None = None  # (dp, pp) counts
    waiting: Array | None = None

    def add(self, actual: StepTimes, without_root: StepTimes) -> None:
        limit = self.threshold * without_root.duration
        late = np.abs(actual.allreduce_arrive - without_root.allreduce_arrive) > limit
        more_wait = (actual.allreduce_start - actual.allreduce_arrive) - (
            without_root.allreduce_start - without_root.allreduce_arrive
        )
        waiting = ~late & (more_wait > limit)
        self.late = late.astype(float) if self.late is None else self.late + late
        self.waiting = waiting.astype(float) if self.waiting is None else self.waiting + waiting
        self.steps += 1

    def ranks(self, fabric: TrainingFabric, counts: Array | None) -> list[int]:
        if counts is None:
            return []
        lay = fabric.layout
        d, s = np.nonzero(counts * 2 >= self.steps)
        ranks = (d[:, None] * lay.pp + s[:, None]) * lay.tp + np.arange(lay.tp)[None, :]
        return sorted(r for r in ranks.ravel().tolist() if r != self.root.target)


@dataclass
class TrainingScenario:
    name: str
    fabric: TrainingFabric
    steps: int
    job: str = "llm-pretrain"
    decisions: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (step, decision fields)
    decision_causes: dict[str, Cause] = field(default_factory=dict)  # decision id -> what it did
    expected_findings: list[str] = field(default_factory=list)
    power_caps: list[tuple[int, float, int]] = field(default_factory=list)  # (node, cap W, from step)
    restart: Restart | None = None
    cascade: Cascade | None = None
    samples: int = 0

    @property
    def tokens_per_step(self) -> float:
        return float(self.fabric.layout.dp * self.fabric.layout.microbatches * TOKENS_PER_MICROBATCH)

    def element(self, c: Cause) -> str:
        return ELEMENT[c.kind].format(job=self.job, target=c.target, next=c.target + 1)

    def run(self) -> Iterator[Message]:
        """(topic kind 'telemetry'|'decisions', key, value) in event-time order; fills the step times."""
        fab, lay, job = self.fabric, self.fabric.layout, self.job
        self.step_times = [0.0] * self.steps
        self.counterfactual = [0.0] * self.steps
        self.attempts: list[dict[str, Any]] = []
        self.phase = np.zeros((self.steps, lay.dp))  # per step, each replica's start behind the quorum's
        self.replica_time = np.zeros((self.steps, lay.dp))  # per step, how long each replica took
        if self.cascade is not None:  # counted afresh on every run
            self.cascade = Cascade(self.cascade.root, self.cascade.threshold)
        topo = topology(fab, job)
        self.samples = sum(b["n"] for b in topo)
        for value in sized_envelopes(f"topology/{job}", 0, topo):
            yield "telemetry", job, value
        moved: dict[int, int] = {}  # rank -> node it runs on, when not its own
        devices = self._devices(moved)
        due, emitted = dict(self.decisions), set()
        t, phase, step, incarnation = T0, np.zeros(lay.dp), 0, 0
        while step < self.steps:
            if step in due and step not in emitted:
                emitted.add(step)
                yield "decisions", job, decision(t, **due[step])
            attempt = 2 if incarnation and self.restart and step <= self.restart.failed_step else 1
            times = fab.simulate(step, attempt=attempt)
            until = None
            if self.restart is not None and not incarnation and step == self.restart.failed_step:
                until = t + self.restart.fail_fraction * times.duration
            summary = {"job": job, "step": step, "start": t, "duration": times.duration if until is None else until - t,
                       "output_units": 0.0 if until is not None else self.tokens_per_step * times.quorum.mean(),
                       "accelerators": lay.ranks, "attempts": attempt,
                       "status": "failed" if until is not None else "restarted" if attempt > 1 else "ok"}  # fmt: skip
            self.attempts.append({k: summary[k] for k in ("step", "attempts", "start", "duration", "status")})
            stages = [(ids, self._caps(nodes, step)) for ids, nodes in devices]
            start = t + phase[:, None] if phase.any() else t
            for value, n in step_messages(fab, job, step, start, times, summary, stages, incarnation, until):
                self.samples += n
                yield "telemetry", job, value
            if self.restart is not None and until is not None:
                yield from self._restart(self.restart, until, moved)
                devices = self._devices(moved)
                t, incarnation, step = until + self.restart.delay_s, incarnation + 1, self.restart.resume_step
                continue
            self.step_times[step] = times.duration
            self.counterfactual[step] = fab.simulate(step, healed=True, attempt=attempt).duration
            if self.cascade is not None and self.cascade.root.active(step):
                self.cascade.add(times, fab.simulate(step, attempt=attempt, without=self.cascade.root))
            self.phase[step], self.replica_time[step] = phase, times.replica_end
            phase = phase + times.replica_end - times.duration  # 0 for the quorum: it shares one barrier
            t += times.duration
            step += 1

    def _devices(self, moved: dict[int, int]) -> list[tuple[list[str], Array]]:
        """Per stage, its device ids and their node indices."""
        lay = self.fabric.layout
        return [(ids, np.array(nodes)) for ids, nodes in (stage_devices(lay, s, moved) for s in range(lay.pp))]

    def _caps(self, nodes: Array, step: int) -> Array:
        caps = np.full(len(nodes), np.inf)
        for node, cap_w, since in self.power_caps:
            if step >= since:
                caps[nodes == node] = cap_w
        return caps

    def _restart(self, restart: Restart, failed_at: float, moved: dict[int, int]) -> Iterator[Message]:
        """The orchestrator's restart decision and the new placement of the failed node's ranks."""
        lay, job = self.fabric.layout, self.job
        ranks = [r for r in range(lay.ranks) if r // GPUS_PER_NODE == restart.node]
        moved.update(dict.fromkeys(ranks, restart.spare))
        decided = failed_at + restart.delay_s / 3
        yield "decisions", job, decision(
            decided, id=f"restart-{job}-{restart.failed_step}", controller=f"elastic-agent/{job}",
            layer="orchestrator", action="restart", targets=[f"job:{job}", f"node:n{restart.node}",
            f"node:n{restart.spare}"], parameters={"from_step": restart.resume_step,
            "replacement": f"node:n{restart.spare}"}, job=job,
            reason=f"node n{restart.node} lost a GPU (Xid 79) in step {restart.failed_step}",
            expected_effect={"metric": "output_units", "direction": "up"})  # fmt: skip
        moves = placement(job, ranks, [restart.spare] * len(ranks), decided)
        self.samples += moves["n"]
        yield "telemetry", job, envelope(f"topology/{job}", 1, [moves])

    def ground_truth(self, seed: int) -> dict[str, Any]:
        lay = self.fabric.layout
        by_decision = {id(c): d for d, c in self.decision_causes.items()}
        causes = [cause(self.element(c), c.kind, c.start_step, c.end_step, c.magnitude, by_decision.get(id(c)))
                  for c in self.fabric.causes]  # fmt: skip
        for i, c in enumerate(self.fabric.causes):
            causes[i].update(self._detail(c))
        extra: dict[str, Any] = {}
        if self.restart is not None:
            causes.append(self._restart_truth(self.restart))
            extra["step_attempts"] = self.attempts
        return {
            "scenario": self.name, "seed": seed, "job": self.job, "steps": self.steps, "t0": T0,
            "layout": {"ranks": lay.ranks, "dp": lay.dp, "pp": lay.pp, "tp": lay.tp, "microbatches": lay.microbatches},
            "causes": causes,
            "expected_findings": self.expected_findings,
            "step_time_s": self.step_times,
            "counterfactual_step_time_s": self.counterfactual,
            **extra,
        }  # fmt: skip

    def _detail(self, c: Cause) -> dict[str, Any]:
        """What a detector may also be scored on, beyond element, steps and magnitude."""
        lay, job = self.fabric.layout, self.job
        if self.cascade is not None and c is self.cascade.root:
            cascade = self.cascade
            return {"affected": [f"rank:{job}/{r}" for r in cascade.ranks(self.fabric, cascade.late)],
                    "waiting": [f"rank:{job}/{r}" for r in cascade.ranks(self.fabric, cascade.waiting)]}  # fmt: skip
        if c.kind == "sync_loss":
            ranks = [int(lay.rank(c.target, s, t)) for s in range(lay.pp) for t in range(lay.tp)]
            active = slice(c.start_step, min(c.end_step, self.steps))
            return {"lost_ranks": [f"rank:{job}/{r}" for r in sorted(ranks)],
                    "phase_offset_s": self.phase[active, c.target].tolist(),
                    "wasted_accel_s": len(ranks) * float(self.replica_time[active, c.target].sum())}  # fmt: skip
        return {}

    def _restart_truth(self, restart: Restart) -> dict[str, Any]:
        first = {a["step"]: a for a in self.attempts if a["attempts"] == 1}
        lost = sum(first[k]["duration"] for k in range(restart.resume_step, restart.failed_step + 1))
        accelerators = self.fabric.layout.ranks
        return cause(
            f"node:n{restart.node}", "restart", restart.resume_step, restart.failed_step + 1,
            restart.failed_step - restart.resume_step + 1, None, failed_step=restart.failed_step,
            resumed_from_step=restart.resume_step, restart_delay_s=restart.delay_s,
            failed_at=first[restart.failed_step]["start"] + first[restart.failed_step]["duration"],
            rerun_accel_s=accelerators * lost, restart_idle_accel_s=accelerators * restart.delay_s,
            replacement=f"node:n{restart.spare}", restart_decision=f"restart-{self.job}-{restart.failed_step}",
        )  # fmt: skip
