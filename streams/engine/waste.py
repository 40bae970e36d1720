"""Waste roll-ups: per window of analysed steps (``size`` steps or ``span_s`` seconds, whichever first:
:class:`~streams.engine.rollup.Windows`), the job's accelerator-seconds by cause of waste (:mod:`economics`),
its allocated and its useful compute accelerator-seconds. A window closes when an analysed step starts past
it, or at the job's end (:meth:`WasteWindows.flush`, the partial window too): steps are analysed some steps
after they ran, so event time alone cannot close it."""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.engine import elements
from streams.engine.economics import WASTE_CAUSES, StepCost
from streams.engine.rollup import Rollup, Windows

WasteRow = tuple[float, float, StepCost]  # (step start, observed step seconds, its cost)


def waste_rollups(job: str, rows: list[WasteRow]) -> list[Rollup]:
    """The roll-ups of one window of steps (``rows`` non-empty, in step order)."""
    start, end = rows[0][0], rows[-1][0] + rows[-1][1]
    costs = [cost for _, _, cost in rows]
    series = {
        elements.cause(cause): ("wasted_accel_s", tuple(c.waste_s[cause] for c in costs)) for cause in WASTE_CAUSES
    }
    series[elements.job(job)] = ("allocated_accel_s", tuple(c.allocated_s for c in costs))
    out = [Rollup(job, entity, name, start, end, v, sum(v)) for entity, (name, v) in series.items()]
    compute = tuple(c.compute_s for c in costs)
    out.append(Rollup(job, elements.job(job), "compute_accel_s", start, end, compute, sum(compute)))
    return out


@dataclass
class WasteWindows:
    job: str
    size: int = 50
    span_s: float = 600.0
    _windows: Windows[WasteRow] = field(init=False)

    def __post_init__(self) -> None:
        self._windows = Windows(self.size, self.span_s)

    def add(self, row: WasteRow) -> list[Rollup]:
        """An analysed step (in step order); the roll-ups of the windows it closed."""
        return [r for rows in self._windows.add(row[0], row) for r in waste_rollups(self.job, rows)]

    def flush(self) -> list[Rollup]:
        """The end of the job: the partial window's roll-ups."""
        return [r for rows in self._windows.flush() for r in waste_rollups(self.job, rows)]
