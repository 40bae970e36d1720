"""Windowed roll-ups of a job's key series: step time and accelerator-seconds per output unit.

A roll-up of per-step values (``step_s``; the blocking family of :mod:`blocking`) also carries them one by
one, ``points`` ([step, start, value]), so a step-by-step series can be read from the trail.

Every roll-up family of a job (this step window, the waste roll-ups of :mod:`waste`) groups its rows into
windows by one rule (:class:`Windows`): a window ends after ``size`` rows or ``span_s`` seconds of event time
from its first row's start, whichever comes first, and the partial window is emitted at the job's end (the
end of the input, or its eviction). Rows come in event-time order, so the windows are a function of the
input alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from streams.engine import elements


@dataclass(frozen=True)
class Rollup:
    job: str
    entity: str
    name: str
    window_start: float
    window_end: float
    values: tuple[float, ...]
    total: float
    steps: tuple[int, ...] = ()  # per value, when each value is one step's: its step and start (``points``)
    starts: tuple[float, ...] = ()

    @property
    def id(self) -> str:
        key = f"rollup|{self.job}|{self.entity}|{self.name}|{self.window_start!r}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        v = np.asarray(self.values)
        p50, p99 = np.percentile(v, (50, 99)).tolist()  # (one partition for both: each the value it is alone)
        out = {
            "id": self.id, "job": self.job, "entity": self.entity, "name": self.name,
            "window_start": self.window_start, "window_end": self.window_end, "n": len(v),
            "mean": float(v.mean()), "p50": p50, "p99": p99,
            "min": float(v.min()), "max": float(v.max()), "total": self.total,
        }  # fmt: skip
        if self.steps:  # the window's values one by one: [step, start, value] (a per-step series)
            each = zip(self.steps, self.starts, self.values, strict=True)
            out["points"] = [[int(n), float(t), float(x)] for n, t, x in each]
        return out


Row = TypeVar("Row")


@dataclass
class Windows(Generic[Row]):
    """Rows, in the order of their start times, grouped into windows: a window ends after ``size`` rows, or
    once a row starts ``span_s`` or more after the window's first (that row begins the next window), or once
    event time reaches that point (:meth:`due`: no row can join it any more), whichever comes first."""

    size: int = 50
    span_s: float = 600.0
    _rows: list[Row] = field(default_factory=list)
    _first: float = 0.0  # the open window's first start

    def add(self, start: float, row: Row) -> list[list[Row]]:
        """Add a row; the windows this closed (oldest first)."""
        closed = self.due(start)
        if not self._rows:
            self._first = start
        self._rows.append(row)
        if len(self._rows) >= self.size:
            closed.append(self._close())
        return closed

    def due(self, time: float) -> list[list[Row]]:
        """The open window, once event time ``time`` is ``span_s`` past its first start."""
        return [self._close()] if self._rows and time >= self._first + self.span_s else []

    def flush(self) -> list[list[Row]]:
        """The partial window (the end of the job)."""
        return [self._close()] if self._rows else []

    def _close(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return rows


StepRow = tuple[float, float, float, float, int]  # start, duration, output units, accelerators, step


@dataclass
class StepWindow:
    """Collects the step summaries of one job into windows (``size`` steps or ``span_s`` seconds,
    :class:`Windows`); once event time passes a window's end (:meth:`due`) or the job ends (:meth:`flush`,
    which also emits the partial window), yields its roll-ups:
    ``step_s``; ``accel_s_per_output`` and its ratio to the job's first window (its healthy baseline, as the
    ratio is read); ``cost_per_output`` when a price per accelerator-hour is set; ``energy_j`` and
    ``energy_j_per_output`` when power samples came in (the power held over the window's span, so a sample
    read after the window's last step still counts for the time before it); ``wasted_accel_s`` of re-runs and
    retries (entity ``cause:retry_rerun``)."""

    job: str
    size: int = 50
    price_per_accel_hour: float = 0.0
    span_s: float = 600.0
    _windows: Windows[StepRow] = field(init=False)
    _full: list[tuple[list[StepRow], float]] = field(default_factory=list)  # (rows, re-run waste) of closed windows
    _baseline: float | None = None
    _power: list[tuple[float, float, float]] = field(default_factory=list)  # (from, to, watts) not yet counted
    _rerun_accel_s: float = 0.0

    def __post_init__(self) -> None:
        self._windows = Windows(self.size, self.span_s)

    def add_energy(self, readings: list[tuple[float, float, float]]) -> None:
        """Power readings, each ``(t0, t1, watts)``: ``watts`` held from ``t0`` to ``t1``."""
        self._power.extend(readings)

    def add_rerun(self, accel_s: float) -> None:
        """Accelerator-seconds spent on work that had to be redone (a re-run step, a retried attempt)."""
        self._rerun_accel_s += accel_s  # 0 adds nothing: no roll-up row

    def add(self, start: float, duration: float, output_units: float, accelerators: float, step: int = -1) -> None:
        self._closed(self._windows.add(start, (start, duration, output_units, accelerators, step)))

    def due(self, time: float) -> list[Rollup]:
        """The roll-ups of the closed windows that ended before event time ``time`` (all input up to ``time``
        is in)."""
        self._closed(self._windows.due(time))
        out: list[Rollup] = []
        while self._full and _end(self._full[0][0]) < time:
            rows, waste = self._full.pop(0)
            out.extend(self._rollups(rows, waste))
        return out

    def flush(self) -> list[Rollup]:
        """The end of the job: every window, the partial one included."""
        self._closed(self._windows.flush())
        return self.due(float("inf"))

    def _closed(self, windows: list[list[StepRow]]) -> None:
        """Windows just closed: each takes the re-run waste counted while it was open."""
        for rows in windows:
            self._full.append((rows, self._rerun_accel_s))
            self._rerun_accel_s = 0.0

    def _energy(self, start: float, end: float) -> float:
        """Joules over [start, end]; readings wholly before ``end`` are used up."""
        if not self._power:
            return 0
        t0, t1, w = np.array(self._power, np.float64).T
        # each term as Python's max(0.0, min(t1, end) - max(t0, start)) takes it (NaN and -0.0 give 0.0), the
        # terms added one after the other (Python's sum, not numpy's pairwise one)
        held = np.where(end < t1, end, t1) - np.where(start > t0, start, t0)
        joules: float = sum((w * np.where(held > 0.0, held, 0.0)).tolist())
        self._power = [p for p, keep in zip(self._power, (t1 > end).tolist(), strict=True) if keep]
        return joules

    def _rollups(self, rows: list[StepRow], rerun_accel_s: float) -> list[Rollup]:
        first = rows[0]
        entity = elements.job(self.job)
        window = (first[0], _end(rows))
        durations = tuple(r[1] for r in rows)
        each = (tuple(r[4] for r in rows), tuple(r[0] for r in rows))
        out = [Rollup(self.job, entity, "step_s", *window, durations, sum(durations), *each)]
        outputs = sum(r[2] for r in rows)
        if outputs > 0 and all(r[3] > 0 for r in rows):
            per_output = tuple(r[1] * r[3] / r[2] for r in rows if r[2] > 0)
            accel_s = sum(r[1] * r[3] for r in rows)
            out.append(Rollup(self.job, entity, "accel_s_per_output", *window, per_output, accel_s))
            if self._baseline is None:
                self._baseline = float(np.median(per_output))
            ratio = tuple(v / self._baseline for v in per_output)
            out.append(Rollup(self.job, entity, "accel_s_per_output_ratio", *window, ratio, sum(ratio)))
            if self.price_per_accel_hour > 0:
                price = self.price_per_accel_hour / 3600
                cost = tuple(v * price for v in per_output)
                out.append(Rollup(self.job, entity, "cost_per_output", *window, cost, accel_s * price))
        energy = self._energy(*window)
        if energy > 0:
            out.append(Rollup(self.job, entity, "energy_j", *window, (energy,), energy))
            if outputs > 0:
                out.append(Rollup(self.job, entity, "energy_j_per_output", *window, (energy / outputs,), energy))
        if rerun_accel_s > 0:
            waste = (rerun_accel_s,)
            out.append(Rollup(self.job, elements.cause("retry_rerun"), "wasted_accel_s", *window, waste, rerun_accel_s))
        return out


def _end(rows: list[StepRow]) -> float:
    last = rows[-1]
    return last[0] + last[1]
