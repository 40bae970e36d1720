"""Where a step's accelerator-seconds went.

Per step, over the ranks that reported spans: ``allocated`` = ranks × observed step time; ``compute`` =
the compute spans' durations (productive time); the rest is waste, split in this order:

- ``straggler_wait``: ranks × the seconds the step would have been shorter with its most costly slow rank,
  replica or stage healed (what-if; counted when that saves at least ``MIN_GAIN`` of the step);
- ``exposed_comm``: ranks × the collective and transfer time on the critical path (communication nothing
  overlapped), capped by what is left;
- ``pipeline_bubble``: the remaining idle time (pipeline fill and drain, and waits not explained above).

Re-runs after restarts and retried steps are counted from step summaries (see the engine), not here.

**Partial tracing.** A traced rank may stand for untraced peers (e.g. one traced tensor-parallel rank per
stage). Then the step's accelerators are not the ranks that sent spans: :class:`Accelerators` gives the
job's count per step — the step summary's ``accelerators`` (that step's, else the latest given), else the
traced ranks with the untraced ranks they ``represent`` (topology), else the traced ranks — and
:meth:`Accelerators.costed` scales a step's costs to it (each untraced rank costed as the traced one
beside it: the same step time, compute and waits).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from streams.engine import elements
from streams.engine.codes import classes
from streams.engine.stepgraph import KINDS, MEMBER, TRANSFER_KINDS, StepGraph
from streams.engine.whatif import StepWhatIf

if TYPE_CHECKING:
    from streams.engine.steps import StepReport

MIN_GAIN = 0.01
KEEP_SUMMARIES = 64  # step summaries' accelerator counts kept (the newest steps)
WASTE_CAUSES = ("straggler_wait", "exposed_comm", "pipeline_bubble")


@dataclass(frozen=True)
class StepCost:
    allocated_s: float
    compute_s: float
    waste_s: dict[str, float]  # cause -> accelerator-seconds

    def scaled(self, factor: float) -> StepCost:
        waste = {cause: s * factor for cause, s in self.waste_s.items()}
        return StepCost(self.allocated_s * factor, self.compute_s * factor, waste)


def compute_seconds(columns: dict[str, npt.NDArray[Any]], compute: npt.NDArray[np.bool_] | None = None) -> float:
    """A step's compute op seconds (every rank's): its productive time. ``compute``: which spans are compute
    ops, when the caller knows (else read from their op class)."""
    mask = classes(columns["op_class"], ("compute",)) == 1 if compute is None else compute
    return float(columns["duration"][mask].sum())


_COMMUNICATION = np.isin(np.arange(KINDS), (MEMBER, *TRANSFER_KINDS))  # per node kind: a communication node
_COMMUNICATION.flags.writeable = False


def step_cost(g: StepGraph, result: StepWhatIf, path: npt.NDArray[np.int64], compute: float, ranks: int) -> StepCost:
    """``path``: the step's critical path (node indices); ``compute``: the step's compute op seconds."""
    allocated = ranks * result.observed_s
    left = max(0.0, allocated - compute)
    gains = [
        gain
        for c, gain in zip(result.candidates, result.gains().values(), strict=True)
        if c.dimension in ("rank", "dp", "stage") and gain >= MIN_GAIN * result.step_s
    ]
    straggler = min(left, ranks * max(gains, default=0.0))
    left -= straggler
    comm = _COMMUNICATION[g.kind[path]]
    exposed = min(left, ranks * float(g.intrinsic[path][comm].sum()))
    left -= exposed
    return StepCost(allocated, compute, dict(zip(WASTE_CAUSES, (straggler, exposed, left), strict=True)))


@dataclass
class Accelerators:
    """A job's accelerator count per step, when its traced ranks are fewer (see the module's docstring)."""

    job: str
    _summaries: dict[int, int] = field(default_factory=dict)  # step -> accelerators (the newest steps)
    _latest: int = 0  # the newest summary's count (0: none given)
    _represented: dict[int, set[int]] = field(default_factory=dict)  # traced rank -> untraced ranks

    def summary(self, step: int, accelerators: int) -> None:
        """A step summary's ``accelerators`` (0: unknown, ignored)."""
        if accelerators <= 0:
            return
        self._summaries[step] = self._latest = accelerators
        if len(self._summaries) > KEEP_SUMMARIES:
            del self._summaries[min(self._summaries)]

    def relations(self, relations: Iterable[tuple[str, str, str]]) -> None:
        """Topology (relation, src, dst): ``represents`` from a traced rank of this job to an untraced one."""
        for relation, src, dst in relations:
            traced, untraced = elements.parse_of_job(src, "rank"), elements.parse_of_job(dst, "rank")
            if relation == "represents" and traced and untraced and traced[0] == untraced[0] == self.job:
                self._represented.setdefault(traced[1], set()).add(untraced[1])

    def count(self, step: int, traced: Iterable[int]) -> int:
        """Accelerators of ``step``, whose spans came from the ``traced`` ranks."""
        given = self._summaries.get(step, self._latest)
        if given:
            return given
        ranks = set(traced)
        return len(ranks.union(*(self._represented.get(r, ()) for r in ranks)))

    def costed(self, report: StepReport) -> StepReport:
        """The step's report with its costs (and ``ranks``, the accelerators its costs count) scaled to the
        accelerators it occupied."""
        traced = np.flatnonzero(report.positions[:, 0] >= 0).tolist()
        n = self.count(report.step, traced)
        if n == report.ranks or report.ranks <= 0:
            return report
        return replace(report, ranks=n, cost=report.cost.scaled(n / report.ranks))
