"""Training-fabric scenario: a data × pipeline × tensor parallel job with a 1F1B pipeline schedule.

Per step every data-parallel replica runs its pipeline (forward and backward of ``microbatches``
microbatches per stage, activations/gradients sent between stages over links); tensor-parallel ranks of a
stage wait for their slowest peer (a ``tp_sync`` span); then each stage's gradients are all-reduced across
the data-parallel replicas (a barrier: the last replica to arrive holds up all of them); then the
optimizer runs. Times are simulated vectorised over replicas, so 16k ranks stay cheap.

Injected causes multiply durations from a step on: a straggler rank (its compute), a slow stage (compute of
every rank in it), a slow link (the sends between two stages), an imbalanced data-parallel replica (its
compute), an imbalance spread over every replica (``spread_dp``: per step, each replica's compute of each
microbatch × a factor drawn around 1 with spread ``magnitude``, as variable sequence lengths do; healed:
every replica at the typical one, factor 1). ``sync_loss`` is partial synchronisation loss: a data-parallel
replica, its compute × magnitude, drops out of the all-reduce quorum. The others' barriers no longer wait
for it and it no longer waits for them: it finishes each step on its own clock, so its phase against the
rest grows step by step (the scenario runner carries that phase across steps; see
``StepTimes.replica_end``). The ground truth carries each cause and the true counterfactual step times: the
same steps simulated with every cause healed.

``blocking``: a stage waits until its send to the neighbour stage has completed before it starts its next
op (batched blocking p2p, as Megatron's ``send_forward_recv_backward`` does); off, a send overlaps the next
op (the ideal scenarios' model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from streams import fpmath

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Cause:
    """``kind``: straggler_rank | slow_stage | slow_link | imbalanced_dp | sync_loss | spread_dp; ``target``
    its index (rank, stage, first stage of the link, replica, replica; spread_dp: unused); durations ×
    ``magnitude`` from ``start_step`` to ``end_step`` (sync_loss: the replica's compute, and it leaves the
    all-reduce quorum; spread_dp: ``magnitude`` is the spread of the per replica and microbatch factors)."""

    kind: str
    target: int
    magnitude: float
    start_step: int
    end_step: int

    def active(self, step: int) -> bool:
        return self.start_step <= step < self.end_step


@dataclass(frozen=True)
class Layout:
    dp: int
    pp: int
    tp: int
    microbatches: int = 8

    @property
    def ranks(self) -> int:
        return self.dp * self.pp * self.tp

    def rank(self, d: Any, s: int, t: Any) -> Any:
        """Global rank of replica ``d``, stage ``s``, tensor index ``t`` (rank = (d * pp + s) * tp + t)."""
        return (np.asarray(d) * self.pp + s) * self.tp + np.asarray(t)

    @classmethod
    def for_ranks(cls, ranks: int, pp: int = 4, tp: int = 4) -> Layout:
        if ranks % (pp * tp):
            raise ValueError(f"--ranks must be a multiple of pp*tp = {pp * tp}")
        return cls(ranks // (pp * tp), pp, tp)


def one_f_one_b(stages: int, microbatches: int) -> list[list[tuple[str, int]]]:
    """Per stage, its order of ('F', m) and ('B', m): warm-up forwards, then alternate, then backwards."""
    order = []
    for s in range(stages):
        warm = min(stages - s - 1, microbatches)
        seq = [("F", m) for m in range(warm)]
        f, b = warm, 0
        while b < microbatches:
            if f < microbatches:
                seq.append(("F", f))
                f += 1
            seq.append(("B", b))
            b += 1
        order.append(seq)
    return order


@dataclass
class StepTimes:
    """Simulated times of one step (all relative to the step start), per replica d, stage s, tensor t."""

    compute: dict[tuple[str, int, int], Array]  # (F|B, stage, microbatch) -> (dp, tp) own durations
    start: dict[tuple[str, int, int], Array]  # -> (dp,) stage start of that op
    end: dict[tuple[str, int, int], Array]  # -> (dp,) stage end (slowest tensor rank)
    arrive: dict[tuple[str, int, int], Array]  # -> (dp,) when the input from the neighbour stage arrived
    link: Array  # (dp, pp) send durations from stage s to s+1
    allreduce_start: Array  # (dp, pp) barrier release (the last replica of its quorum arrived)
    allreduce_arrive: Array  # (dp, pp) when each replica's stage finished its backward pass
    allreduce_s: float
    optimizer_s: float
    duration: float  # the step of the all-reduce quorum (every replica unless one lost sync)
    replica_end: Array  # (dp,) when each replica finished the step (differs from duration out of the quorum)
    quorum: npt.NDArray[np.bool_]  # (dp,) replicas whose all-reduce waited for each other


@dataclass
class TrainingFabric:
    layout: Layout
    seed: int = 0
    forward_s: float = 0.010
    link_s: float = 0.002
    allreduce_s: float = 0.030
    optimizer_s: float = 0.008
    jitter: float = 0.02
    thermal_drift: float = 0.0  # relative compute slowdown per 1000 steps on every rank (0: none)
    causes: list[Cause] = field(default_factory=list)
    blocking: bool = False

    def simulate(self, step: int, healed: bool = False, attempt: int = 1, without: Cause | None = None,
                 only: Cause | None = None) -> StepTimes:  # fmt: skip
        """One step. ``healed``: as if no cause were injected (the counterfactual); same noise. ``without``:
        as if that one cause were not injected; ``only``: as if it were the only one. ``attempt`` > 1: the
        step run again after a restart (fresh noise)."""
        lay = self.layout
        rng = np.random.default_rng([self.seed, step] if attempt == 1 else [self.seed, step, attempt])
        noise = 1 + self.jitter * rng.uniform(-1, 1, size=(2, lay.microbatches, lay.dp, lay.pp, lay.tp))
        factor = np.full((lay.dp, lay.pp, lay.tp), 1 + self.thermal_drift * step / 1000)
        link = self.link_s * (1 + self.jitter * rng.uniform(-1, 1, size=(lay.dp, lay.pp)))
        quorum = np.ones(lay.dp, dtype=bool)
        chosen = [] if healed else [only] if only is not None else self.causes
        for c in [c for c in chosen if c.active(step) and c is not without]:
            if c.kind == "straggler_rank":
                d, rest = divmod(c.target, lay.pp * lay.tp)
                factor[d, rest // lay.tp, rest % lay.tp] *= c.magnitude
            elif c.kind == "slow_stage":
                factor[:, c.target, :] *= c.magnitude
            elif c.kind in ("imbalanced_dp", "sync_loss"):
                factor[c.target] *= c.magnitude
                quorum[c.target] &= c.kind != "sync_loss"
            elif c.kind == "slow_link":
                link[:, c.target] *= c.magnitude
            elif c.kind == "spread_dp":  # its own random stream: the noise stays the same, healed or not
                spread = np.random.default_rng([self.seed, step, 7]).normal(size=(lay.microbatches, lay.dp))
                noise = noise * fpmath.exp(c.magnitude * spread)[None, :, :, None, None]
        return self._pipeline(noise, factor, link, quorum)

    def _pipeline(self, noise: Array, factor: Array, link: Array, quorum: npt.NDArray[np.bool_]) -> StepTimes:
        lay = self.layout
        Key = tuple[str, int, int]
        compute: dict[Key, Array] = {}
        start: dict[Key, Array] = {}
        end: dict[Key, Array] = {}
        arrive: dict[Key, Array] = {}
        clock = np.zeros((lay.pp, lay.dp))
        order = one_f_one_b(lay.pp, lay.microbatches)
        pos = [0] * lay.pp
        while any(pos[s] < len(order[s]) for s in range(lay.pp)):
            progressed = False
            for s in range(lay.pp):
                if pos[s] == len(order[s]):
                    continue
                kind, m = order[s][pos[s]]
                if kind == "F":
                    dep = None if s == 0 else end.get(("F", s - 1, m))
                    ready = s == 0 or dep is not None
                    came = np.zeros(lay.dp) if s == 0 else (dep + link[:, s - 1] if dep is not None else None)
                else:
                    dep = end.get(("F", s, m)) if s == lay.pp - 1 else end.get(("B", s + 1, m))
                    ready = dep is not None
                    came = None if dep is None else (dep if s == lay.pp - 1 else dep + link[:, s])
                if not ready or came is None:
                    continue
                own = self.forward_s * (1 if kind == "F" else 2) * factor[:, s, :] * noise[int(kind == "B"), m, :, s, :]
                begin = np.maximum(clock[s], came)
                key = (kind, s, m)
                compute[key], start[key], arrive[key] = own, begin, came
                end[key] = begin + own.max(axis=1)
                clock[s] = end[key]
                to = s + 1 if kind == "F" else s - 1
                if self.blocking and 0 <= to < lay.pp:  # the stage waits for its send to complete
                    clock[s] = end[key] + link[:, min(s, to)]
                pos[s] += 1
                progressed = True
            if not progressed:
                raise RuntimeError("1F1B schedule deadlocked (a bug in the simulator)")
        arrive_ar = clock.T.copy()  # (dp, pp): each replica's stage is done with its backward passes
        # the quorum's barrier releases when its last member arrives; a replica outside it only waits for itself
        release = np.where(quorum[:, None], arrive_ar[quorum].max(axis=0), arrive_ar)
        replica_end = (release + self.allreduce_s).max(axis=1) + self.optimizer_s
        duration = float(replica_end[quorum].max())
        return StepTimes(compute, start, end, arrive, link, release, arrive_ar, self.allreduce_s,
                         self.optimizer_s, duration, replica_end, quorum)  # fmt: skip
