"""Where a step's accelerator-seconds went.

Per step, over the ranks that reported spans: ``allocated`` = ranks × observed step time; ``compute`` =
the compute spans' durations (productive time); the rest is waste, split in this order:

- ``straggler_wait``: ranks × the seconds the step would have been shorter with its most costly slow rank,
  replica or stage healed (what-if; counted when that saves at least ``MIN_GAIN`` of the step);
- ``exposed_comm``: ranks × the collective and transfer time on the critical path (communication nothing
  overlapped), capped by what is left;
- ``pipeline_bubble``: the remaining idle time (pipeline fill and drain, and waits not explained above).

Re-runs after restarts and retried steps are counted from step summaries (see the engine), not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.engine.stepgraph import MEMBER, RECV, SEND, StepGraph
from streams.engine.whatif import StepWhatIf

MIN_GAIN = 0.01
WASTE_CAUSES = ("straggler_wait", "exposed_comm", "pipeline_bubble")


@dataclass(frozen=True)
class StepCost:
    allocated_s: float
    compute_s: float
    waste_s: dict[str, float]  # cause -> accelerator-seconds


def step_cost(
    g: StepGraph, result: StepWhatIf, path: npt.NDArray[np.int64], columns: Mapping[str, npt.NDArray[Any]], ranks: int
) -> StepCost:
    """``path``: the step's critical path (node indices)."""
    allocated = ranks * result.observed_s
    compute = float(columns["duration"][columns["op_class"] == "compute"].sum())
    left = max(0.0, allocated - compute)
    gains = [
        gain
        for c, gain in zip(result.candidates, result.gains().values(), strict=True)
        if c.dimension in ("rank", "dp", "stage") and gain >= MIN_GAIN * result.step_s
    ]
    straggler = min(left, ranks * max(gains, default=0.0))
    left -= straggler
    comm = np.isin(g.kind[path], (MEMBER, SEND, RECV))
    exposed = min(left, ranks * float(g.intrinsic[path][comm].sum()))
    left -= exposed
    return StepCost(allocated, compute, dict(zip(WASTE_CAUSES, (straggler, exposed, left), strict=True)))
