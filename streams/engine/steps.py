"""Per job: collect each step's op spans, and once the step is complete analyse it on its dependency graph.

A step is complete when spans of a step ``LAG`` or more later arrive (or on :meth:`JobSteps.flush`), so
the decision depends on input order only. Spans of a step already analysed are counted as late and
dropped. The analysis of a step: the what-if evaluation (:mod:`whatif`), the critical path, and the
economics of the step (:mod:`economics`).

Structures (schedule, peer roles) are cached by the graph's signature, at most ``MAX_STRUCTURES`` of them;
a structure's peer roles and rank positions are made again for a step whose node columns (ops, ranks,
stages: not in the signature) are not those they were made from, and are not in a snapshot (made again
from the first step after a restore: the same as kept, never another step's).
The job's healthy baseline is the per-node peer median over the first ``BASELINE_STEPS`` analysed steps of
a structure (the first steps of a job are assumed healthy; a detector warms up on them too).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.engine.codes import classes, key_sums
from streams.engine.economics import StepCost, compute_seconds, step_cost
from streams.engine.medians import nanmedian
from streams.engine.stepgraph import (
    BLOCKING,
    CHAIN,
    COMPUTE,
    MEMBER,
    OP_CLASSES,
    RECV,
    SEND,
    Codebook,
    Floats,
    Schedule,
    StepGraph,
    StepGraphError,
    build,
)
from streams.engine.whatif import Roles, StepWhatIf, what_if

LAG = 2
BASELINE_STEPS = 10
MAX_STRUCTURES = 8
OP_COLUMNS = ("rank", "dp", "pp", "tp", "op", "op_class", "start", "duration", "microbatch", "group", "seq", "peer",
              "p2p", "blocking")  # fmt: skip
OPTIONAL = {"p2p": "", "blocking": False}  # columns a caller may leave out (the contract's defaults)


@dataclass(frozen=True)
class CriticalPath:
    """Where a step's critical path spent its time: seconds per rank, stage and op class."""

    ranks: dict[int, float]
    stages: dict[int, float]
    op_classes: dict[str, float]


@dataclass(frozen=True)
class StepReport:
    job: str
    step: int
    t0: float
    whatif: StepWhatIf
    critical_path: CriticalPath
    cost: StepCost
    ranks: int
    positions: npt.NDArray[np.int64]  # per rank: (dp, pp, tp), -1 where a rank did not report
    replica_phase: Floats  # per data-parallel replica: its first start less the median replica's (NaN: absent)


@dataclass
class _Structure:
    schedule: Schedule
    roles: Roles | None = None
    positions: npt.NDArray[np.int64] | None = None
    ranks: int = 0  # the ranks with spans (made with ``positions``)
    warmup: list[Floats] = field(default_factory=list)
    baseline: Floats | None = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "roles": None, "positions": None}  # (made again from the next step's graph)


@dataclass
class JobSteps:
    job: str
    late_spans: int = 0
    failed_steps: int = 0  # steps whose spans did not form a dependency graph
    ops: Codebook = field(default_factory=Codebook)
    groups: Codebook = field(default_factory=Codebook)
    _pending: dict[int, list[dict[str, npt.NDArray[Any]]]] = field(default_factory=dict)
    _done_through: int = -1
    _structures: OrderedDict[bytes, _Structure] = field(default_factory=OrderedDict)

    def add(self, steps: npt.NDArray[np.int64], columns: dict[str, npt.NDArray[Any]]) -> list[StepReport]:
        """Add op spans of this job (any steps); returns the reports of the steps this completed."""
        for step, rows, n in _step_rows(steps):
            if step <= self._done_through:
                self.late_spans += n
                continue
            part = {k: columns[k][rows] if k in columns else np.full(n, OPTIONAL[k]) for k in OP_COLUMNS}
            self._pending.setdefault(step, []).append(part)
        newest = max(self._pending, default=-1)
        return list(self._analysed([s for s in sorted(self._pending) if s <= newest - LAG]))

    def flush(self) -> list[StepReport]:
        return list(self.flushing())

    def flushing(self) -> Iterator[StepReport]:
        """:meth:`flush`, one step at a time: a step is analysed once the caller is done with the report
        before it (at the end of a large job, one step graph alive at a time, not one per pending step)."""
        return self._analysed(sorted(self._pending))

    def _analysed(self, steps: list[int]) -> Iterator[StepReport]:
        for i, step in enumerate(steps):
            self._done_through = max(self._done_through, step)
            parts = self._pending.pop(step)
            if i == 0:  # (what stays pending is owned once: nothing is added while these steps are analysed)
                _own_rows([p for rest in self._pending.values() for p in rest])
            try:
                yield self._report(step, _joined(parts))
            except StepGraphError:
                self.failed_steps += 1

    def _report(self, step: int, columns: dict[str, npt.NDArray[Any]]) -> StepReport:
        """The step's analysis; its columns are let go once its graph is built (the what-if is the peak of
        a large job's memory)."""
        cache = {sig: s.schedule for sig, s in self._structures.items()}
        op_class = classes(columns["op_class"], OP_CLASSES)  # (the graph's and the compute seconds': read once)
        g = build(columns, self.ops, self.groups, cache, op_class)
        replica_phase, compute = phases(columns), compute_seconds(columns, op_class == COMPUTE)
        columns.clear()
        del op_class
        structure = self._structures.get(g.signature)
        if structure is None:
            structure = self._structures[g.signature] = _Structure(cache[g.signature])
            while len(self._structures) > MAX_STRUCTURES:
                self._structures.popitem(last=False)
        self._structures.move_to_end(g.signature)
        if structure.roles is None or not structure.roles.fits(g):
            structure.roles = Roles.of(g)
            spans = g.span >= 0
            structure.positions = np.full((int(g.rank.max(initial=0)) + 1, 3), -1, np.int64)
            structure.positions[g.rank[spans]] = np.stack([g.dp[spans], g.pp[spans], g.tp[spans]], axis=1)
            structure.ranks = int(np.count_nonzero(np.bincount(g.rank[spans])))
        result = what_if(g, self.job, self.ops.names, structure.baseline, structure.roles)
        if structure.baseline is None:
            structure.warmup.append(result.peer_median)
            if len(structure.warmup) >= BASELINE_STEPS:
                structure.baseline = np.median(np.stack(structure.warmup), axis=0)
                structure.warmup = []
        ranks = structure.ranks
        path = g.critical_path(result.ends)
        cost = step_cost(g, result, path, compute, ranks)
        assert structure.positions is not None
        return StepReport(
            self.job, step, g.t0, result, summarise(g, path), cost, ranks, structure.positions, replica_phase
        )


def _step_rows(steps: npt.NDArray[np.int64]) -> list[tuple[int, slice | npt.NDArray[np.bool_], int]]:
    """Each step of a batch (ascending): its rows and their count. Where the batch's steps ascend (the usual
    batch of a few steps) its rows are a slice (views, no copy), else a mask."""
    if not len(steps):
        return []
    if steps[0] == steps[-1] and (steps == steps[0]).all():  # one step (the usual message): its columns as they are
        return [(int(steps[0]), slice(None), len(steps))]
    if (steps[1:] >= steps[:-1]).all():
        bounds = [0, *(np.flatnonzero(steps[1:] != steps[:-1]) + 1).tolist(), len(steps)]
        return [(int(steps[lo]), slice(lo, hi), hi - lo) for lo, hi in itertools.pairwise(bounds)]
    masks = ((step, steps == step) for step in np.unique(steps).tolist())
    return [(step, mask, int(np.count_nonzero(mask))) for step, mask in masks]


def _own_rows(parts: list[dict[str, npt.NDArray[Any]]]) -> None:
    """Parts that stay pending get their own copy of columns that are views into larger arrays (a batch
    holding the steps analysed now too), so that those arrays go with the steps analysed (each row is
    copied once at most)."""
    for part in parts:
        for k, v in part.items():
            if isinstance(v.base, np.ndarray) and v.base.nbytes > v.nbytes:
                part[k] = v.copy()


def _joined(parts: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    """A step's columns from its parts, which are emptied as they are joined: a column's parts (and the
    batch columns they are views of) go as soon as it is joined, so a step is not held twice. One part (the
    usual case): its columns as they are."""
    if len(parts) == 1:
        return {k: np.ascontiguousarray(v) for k, v in parts.pop().items()}
    return {k: np.concatenate([p.pop(k) for p in parts]) for k in OP_COLUMNS}


def summarise(g: StepGraph, path: npt.NDArray[np.int64]) -> CriticalPath:
    path = path[g.span[path] >= 0]
    own = g.intrinsic[path]
    kinds, ranks, stages = _totals(own, g.kind[path], g.rank[path], g.pp[path])
    by_class: dict[str, float] = {}
    for k, total in kinds.items():
        by_class[_CLASS_NAMES[k]] = by_class.get(_CLASS_NAMES[k], 0.0) + total
    return CriticalPath(ranks=ranks, stages=stages, op_classes=by_class)


_CLASS_NAMES = {CHAIN: "compute", MEMBER: "collective", SEND: "transfer", RECV: "transfer", BLOCKING: "transfer"}


def _totals(weights: Floats, *columns: npt.NDArray[np.int64]) -> list[dict[int, float]]:
    """Per column (of one length), the sum of ``weights`` per distinct key, keys ascending: the columns one
    after another in one :func:`key_sums` (column ``i``'s key ``k`` at ``i * width + k``: the same sums, each
    key's weights added in order) when no key is negative (a path's columns: one call, not one per column)."""
    joined = np.concatenate(columns).astype(np.int64, copy=False)
    if int(joined.min(initial=0)) < 0:
        return [dict(zip(*(a.tolist() for a in key_sums(c, weights)), strict=True)) for c in columns]
    width, n = int(joined.max(initial=-1)) + 1, len(weights)
    for i in range(1, len(columns)):
        joined[i * n : (i + 1) * n] += i * width
    present, sums = key_sums(joined, np.concatenate([weights] * len(columns)))
    out: list[dict[int, float]] = [{} for _ in columns]
    for k, total in zip(present.tolist(), sums.tolist(), strict=True):
        out[k // width][k % width] = total
    return out


def phases(columns: dict[str, npt.NDArray[Any]]) -> Floats:
    dp = np.asarray(columns["dp"], np.int64)
    first = np.full(int(dp.max(initial=0)) + 1, np.inf)
    np.minimum.at(first, dp, np.asarray(columns["start"], np.float64))
    first[~np.isfinite(first)] = np.nan
    out: Floats = first - nanmedian(first)
    return out
