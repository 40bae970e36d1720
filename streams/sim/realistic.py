"""The realistic training mode: the fabric with blocking batched p2p, recorded as a real exporter records it
(:mod:`exporter`), causes present from step 0 (or from mid-run), and a ground truth with both slowdown
definitions.

Per traced step the ground truth has, from the simulator's own model with the same noise: ``actual_s``
(T(actual)), ``ideal_s`` (T(ideal): no injected slowness), and per cause X ``healed_s`` (T(actual with X
healed)) and ``ideal_except_s`` (T(ideal except X): X the only slowness). So, over any steps: X's slowdown
healing only X is sum(actual) / sum(healed); leaving only X unhealed, sum(ideal_except) / sum(ideal); the
job's blocking slowdown sum(actual) / sum(ideal). ``noiseless_ideal_s`` is T(ideal) without the per-op
noise either (every op at its typical duration, as an ideal built from peers' typical durations is): the
gap between the two is what noise alone costs at the barriers. Every step still runs (untraced steps take time too), so
``step_time_s`` and ``counterfactual_step_time_s`` cover every step, as in every scenario.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from streams.contract.sizing import split_by_size
from streams.sim.base import T0, Message, cause, envelope
from streams.sim.emit import topology
from streams.sim.exporter import Exporter, recorded, stage_spans
from streams.sim.sizing import sized_envelopes
from streams.sim.training import Cause, Layout, TrainingFabric
from streams.sim.training_run import ELEMENT, TOKENS_PER_MICROBATCH

SPREAD_ELEMENT = "spread:{job}/dp"


def realistic_layout(ranks: int) -> Layout:
    """Data × pipeline × tensor parallel: tp and pp 2 below 32 ranks (pp 4 from 32, tp 4 from 64), at least
    two data-parallel replicas."""
    tp, pp = (4 if ranks >= 64 else 2), (4 if ranks >= 32 else 2)
    if ranks % (pp * tp) or ranks < 2 * pp * tp:
        raise ValueError(f"realistic scenarios need --ranks a multiple of {pp * tp}, at least {2 * pp * tp}")
    return Layout(ranks // (pp * tp), pp, tp)


@dataclass
class RealisticScenario:
    name: str
    fabric: TrainingFabric
    steps: int
    exporter: Exporter = field(default_factory=Exporter)
    job: str = "llm-pretrain"
    expected_findings: list[str] = field(default_factory=list)
    samples: int = 0

    def element(self, c: Cause) -> str:
        pattern = SPREAD_ELEMENT if c.kind == "spread_dp" else ELEMENT[c.kind]
        return pattern.format(job=self.job, target=c.target, next=c.target + 1)

    def traced_tp(self) -> list[int]:
        tp = self.exporter.traced_tp
        return list(range(self.fabric.layout.tp)) if tp is None else [tp]

    def run(self) -> Iterator[Message]:
        """Topology once, then per traced step the exporter's messages; fills the ground truth's step times."""
        fab, lay, job, exp = self.fabric, self.fabric.layout, self.job, self.exporter
        self.step_times, self.counterfactual = [0.0] * self.steps, [0.0] * self.steps
        self.per_step: dict[str, list[float]] = {"step": [], "actual_s": [], "ideal_s": [], "noiseless_ideal_s": []}
        self.per_cause: list[dict[str, list[float]]] = [{"healed_s": [], "ideal_except_s": []} for _ in fab.causes]
        topo = topology(fab, job)
        self.samples = sum(b["n"] for b in topo)
        for value in sized_envelopes(f"topology/{job}", 0, topo):
            yield "telemetry", job, value
        t, held = T0, deque[list[bytes]]()  # per traced step, the messages the exporter delays
        for step in range(self.steps):
            times = fab.simulate(step)
            self.step_times[step] = times.duration
            self.counterfactual[step] = fab.simulate(step, healed=True).duration
            if exp.traces(step):
                self._truth(step)
                summary = {"job": job, "step": step, "start": t, "duration": times.duration,
                           "output_units": float(lay.dp * lay.microbatches * TOKENS_PER_MICROBATCH),
                           "accelerators": lay.ranks, "attempts": 1, "status": "ok"}  # fmt: skip
                alone = exp.traced_tp is not None
                spans = [stage_spans(fab, times, step, s, tp, alone) for s in range(lay.pp) for tp in self.traced_tp()]
                rng = np.random.default_rng([fab.seed, step, 11])
                columns = _concat([recorded(exp, data, t, rng) for data in spans])
                held.append([])
                for value, n, late in self._messages(step, columns, summary, rng):
                    self.samples += n
                    if late:
                        held[-1].append(value)
                    else:
                        yield "telemetry", job, value
                while len(held) > exp.delay:
                    yield from (("telemetry", job, value) for value in held.popleft())
            t += times.duration
        yield from (("telemetry", job, value) for values in held for value in values)

    def _truth(self, step: int) -> None:
        fab = self.fabric
        self.per_step["step"].append(float(step))
        self.per_step["actual_s"].append(self.step_times[step])
        self.per_step["ideal_s"].append(self.counterfactual[step])
        self.per_step["noiseless_ideal_s"].append(replace(fab, jitter=0.0).simulate(step, healed=True).duration)
        for c, truth in zip(fab.causes, self.per_cause, strict=True):
            truth["healed_s"].append(fab.simulate(step, without=c).duration)
            truth["ideal_except_s"].append(fab.simulate(step, only=c).duration)

    def _messages(self, step: int, columns: dict[str, npt.NDArray[Any]], summary: dict[str, Any],
                  rng: np.random.Generator) -> Iterator[tuple[bytes, int, bool]]:  # fmt: skip
        """(message, samples, delayed) of one traced step, grouped as the exporter batches; the summary goes
        with the first traced rank's spans; with a ``delay``, those of odd replicas are delayed."""
        exp, job = self.exporter, self.job
        key = {"rank": columns["rank"], "stage": columns["pp"], "step": np.zeros_like(columns["rank"])}[exp.batching]
        groups = [np.flatnonzero(key == k) for k in np.unique(key)]
        if exp.shuffle:
            groups = [rng.permutation(groups[i]) for i in rng.permutation(len(groups))]
        first = int(columns["rank"].min())
        for rows in groups:
            name = {"rank": f"rank{columns['rank'][rows[0]]}", "stage": f"stage{columns['pp'][rows[0]]}",
                    "step": "all"}[exp.batching]  # fmt: skip
            part = {k: v[rows] for k, v in columns.items()}
            with_summary = bool((part["rank"] == first).any())
            late = exp.delay > 0 and int(part["dp"].min()) % 2 == 1

            def encode(i: int, parts: int, lo: int, hi: int, part: dict[str, Any] = part, name: str = name,
                       with_summary: bool = with_summary) -> bytes:  # fmt: skip
                data = {k: v[lo:hi] if v.dtype.kind not in "OU" else v[lo:hi].tolist() for k, v in part.items()}
                batches: list[dict[str, Any]] = [{"kind": "op", "n": hi - lo, "data": {**data, "job": job,
                                                                                        "step": step}}]  # fmt: skip
                if with_summary and i == parts - 1:
                    batches.append({"kind": "step", "n": 1, "data": summary})
                suffix = f"/part{i}" if i else ""
                return envelope(f"trainer/{job}/{name}{suffix}", step, batches)

            messages = split_by_size(len(rows), encode)
            for i, value in enumerate(messages):
                n = len(rows) * (i + 1) // len(messages) - len(rows) * i // len(messages)
                yield value, n + (with_summary and i == len(messages) - 1), late

    def ground_truth(self, seed: int) -> dict[str, Any]:
        lay, steps = self.fabric.layout, self.per_step
        causes = []
        for c, truth in zip(self.fabric.causes, self.per_cause, strict=True):
            active = [i for i, s in enumerate(steps["step"]) if c.active(int(s))]
            healing = _ratio(steps["actual_s"], truth["healed_s"], active)
            alone = _ratio(truth["ideal_except_s"], steps["ideal_s"], active)
            causes.append(cause(self.element(c), c.kind, c.start_step, min(c.end_step, self.steps), c.magnitude,
                                None, **truth, slowdown=healing, slowdown_unhealed=alone))  # fmt: skip
        return {
            "scenario": self.name, "seed": seed, "job": self.job, "steps": self.steps, "t0": T0, "mode": "realistic",
            "layout": {"ranks": lay.ranks, "dp": lay.dp, "pp": lay.pp, "tp": lay.tp, "microbatches": lay.microbatches},
            "exporter": asdict(self.exporter),
            "causes": causes,
            "expected_findings": self.expected_findings,
            "step_time_s": self.step_times,
            "counterfactual_step_time_s": self.counterfactual,
            "traced": {**steps, "step": [int(s) for s in steps["step"]]},
            "blocking_slowdown": _ratio(steps["actual_s"], steps["ideal_s"], range(len(steps["step"]))),
        }  # fmt: skip


def _ratio(num: list[float], den: list[float], rows: Any) -> float | None:
    """sum(num) / sum(den) over ``rows`` (None: no rows)."""
    rows = list(rows)
    return sum(num[i] for i in rows) / sum(den[i] for i in rows) if rows else None


def _concat(parts: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# the realistic causes: (kind, magnitude, target chooser over the layout and seed)
Target = Callable[[Layout, int, int], int]
REALISTIC_CAUSES: dict[str, tuple[str, float, Target]] = {
    "slow-dp": ("imbalanced_dp", 1.3, lambda lay, seed, tp: (seed * 7919 + 1) % lay.dp),
    "slow-stage": ("slow_stage", 1.3, lambda lay, seed, tp: (seed * 7919 + 1) % lay.pp),
    "slow-rank": ("straggler_rank", 1.3,
                  lambda lay, seed, tp: int(lay.rank((seed * 7919 + 3) % lay.dp, (seed * 31 + 1) % lay.pp, tp))),
    "slow-link": ("slow_link", 4.0, lambda lay, seed, tp: (seed * 7919 + 1) % (lay.pp - 1)),
    "spread-dp": ("spread_dp", 0.15, lambda lay, seed, tp: 0),
}  # fmt: skip


class Builder(Protocol):
    def __call__(self, seed: int, ranks: int, steps: int, exporter: Exporter | None = None) -> RealisticScenario: ...


def realistic(*cause_names: str, from_step: Callable[[int], int] = lambda steps: 0, name: str = "") -> Builder:
    """A builder of a realistic scenario with these causes (none: healthy), all from ``from_step(steps)`` to
    the end; a slow rank is a traced one (an untraced rank shows only through the traced rank standing for
    it). ``name``: the scenario's name after ``realistic-`` (default: the one cause's, or ``healthy``)."""

    def build(seed: int, ranks: int, steps: int, exporter: Exporter | None = None) -> RealisticScenario:
        exporter = exporter or Exporter()
        layout = realistic_layout(ranks)
        if exporter.traced_tp is not None and not 0 <= exporter.traced_tp < layout.tp:
            raise ValueError(f"exporter traced_tp must be below tp = {layout.tp} (or all)")
        fabric = TrainingFabric(layout, seed=seed, blocking=True)
        suffix = "-midrun" if from_step(steps) else ""
        title = name or (cause_names[0] if cause_names else "healthy")
        scenario = RealisticScenario(f"realistic-{title}{suffix}", fabric, steps, exporter)
        for cause_name in cause_names:
            kind, magnitude, target = REALISTIC_CAUSES[cause_name]
            fabric.causes.append(Cause(kind, target(layout, seed, exporter.traced_tp or 0), magnitude,
                                       from_step(steps), steps))  # fmt: skip
            scenario.expected_findings = ["structural_slowdown"] + (["step_time_drift"] if suffix else [])
        return scenario

    return build


REALISTIC: dict[str, Builder] = {
    **{f"realistic-{name}": realistic(name) for name in REALISTIC_CAUSES},
    "realistic-slow-rank-midrun": realistic("slow-rank", from_step=lambda steps: steps // 3),
    # two causes at once, where healing only one and leaving only one unhealed differ
    "realistic-slow-rank-and-link": realistic("slow-rank", "slow-link", name="slow-rank-and-link"),
    "realistic-slow-rank-and-dp": realistic("slow-rank", "slow-dp", name="slow-rank-and-dp"),
    "realistic-healthy": realistic(),
}
