"""Which ranks of a job are *systematically* slow, and the typical duration of a peer group without them.

A straggler is systematic: a slow accelerator, host or data shard slows the ops its rank runs step after
step, so the rank's durations stay above its peers'. Noise is not: an op that overslept its device wait, a
preempted thread, a slow exchange moves from op to op and from rank to rank. For exchangeable peers (only
noise) a node is as likely to be above its peer group's middle as below it, whatever the noise's shape
(one-sided, heavy-tailed): with an even count exactly half of a group is above. That makes a weighted sign
test per rank:

- per analysed step and rank, ``S`` = the sum over its nodes in peer groups of two or more of the group's
  middle (the op's size: a 20 ms backward weighs more than a 5 µs host op) times the sign of the node's
  deviation from it, and ``Q`` = the sum of the squared sizes (ties count neither way);
- over the job's last ``WINDOW`` analysed steps, with noise alone ``S`` is a sum of fair random signs, so
  ``P(S >= s) <= exp(-s^2 / 2Q)`` (Hoeffding's bound, conditional on the sizes);
- a rank is systematically slow when that bound is at most ``ALPHA`` / (the ranks tested): a stated
  level, Bonferroni over the job's ranks (links are a second family at the same level), never a floor tuned
  on a run. It holds per look (the window is judged again after every analysed step) and only as far as a
  rank's signs are independent (below).

The signs of one rank's nodes are taken as independent: noise shared by all of a rank's ops for one step (a
rank slow for a step) counts as evidence, so such a rank is left out of its peers while the window holds it
(with many replicas that barely moves their middle; with two, the typical one is the other's, as a lower
median would take). The simulator's links are such a case: one noise draw per replica and step for all of a
link's transfers, so a healthy realistic run calls one of its links in about a third of its steps (its
blocking slowdown stays 1.003). One step rarely suffices (a 6-rank torch job's slow rank is above on 8 large ops per
step), so the test is over the window, and a straggler is left out from its second or third analysed step
on. An imbalance spread over replicas (every step another replica heavier) is not systematic for any rank
and stays in the spread (:mod:`decompose`).

The typical duration of a peer group is the middle of its members on ranks that are not systematically slow
(for an even count the mean of the two middle values), so the ideal keeps the noise every rank has, as the
OSDI'25 what-if analysis does by averaging each op over its workers and steps, and leaves out a straggler's
slowness: with two replicas, one of them slow, the typical one is the other; with two noisy ones it is their
middle, not the luckier one. A group whose every member is systematically slow keeps its lower median.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine.codes import compact
from streams.engine.medians import LOWER, MIDDLE, grouped
from streams.engine.stepgraph import Floats, Ints

ALPHA = 0.001  # per look: at most this chance that a job of only noisy, independent ranks has one called
WINDOW = 10  # analysed steps of evidence (the structural_slowdown detector's window)
NONE = np.zeros(0, np.int64)
Slow = tuple[Ints, Ints]  # a job's systematically slow ranks and links
_DEVIATIONS = hasattr(native.core, "unit_deviations")  # (native/src/whatif.rs; without it, the definition)
_WINDOW = hasattr(native.core, "window_z")  # (the same)


class Grouped:
    """Positions grouped by an integer key (negative: no group), prepared once per structure; per position its
    group's lower median (``LOWER``) or middle (``MIDDLE``, the mean of the two middle values)."""

    def __init__(self, keys: Ints, how: int = LOWER) -> None:
        self.how = how
        self.members = compact(np.flatnonzero(keys >= 0))  # (kept per structure: int32)
        k = keys[self.members]
        self.order = compact(np.argsort(k, kind="stable"))
        sk = k[self.order]
        self.starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, np.int64)
        self.counts = np.diff(np.r_[self.starts, len(sk)])
        self.size = len(keys)

    def by(self, how: int) -> Grouped:
        """The same groups (their arrays shared, not copied), with another statistic."""
        other = copy.copy(self)
        other.how = how
        return other

    def typical(self, values: Floats) -> Floats:
        """``values`` with each grouped position replaced by its group's statistic."""
        out = values.copy()
        if not len(self.members):
            return out
        per = grouped(values, self.order, self.starts, self.counts, self.how, self.members)
        if per is None:  # the same values as the native core
            v = values[self.members][self.order]
            group = np.repeat(np.arange(len(self.starts)), self.counts)  # (per member: made when needed)
            ranked = v[np.lexsort((v, group))]
            low = ranked[self.starts + (self.counts - 1) // 2]
            per = low if self.how == LOWER else (low + ranked[self.starts + self.counts // 2]) / 2
        out[self.members[self.order]] = np.repeat(per, self.counts)
        return out

    def grouping(self) -> tuple[Ints, Ints, Ints, Ints]:
        """What the native core reads of the groups (native/src/whatif.rs ``Grouping``)."""
        return self.order, self.members, self.starts, self.counts

    def sizes(self) -> Ints:
        """Per position: how many members its group has (0: not grouped)."""
        out = np.zeros(self.size, np.int64)
        out[self.members[self.order]] = np.repeat(self.counts, self.counts)
        return out


class Unsystematic:
    """Per structure: positions grouped by peers (``keys``) and the rank each runs on (``unit``); per position
    its group's middle over the members on units that are not systematically slow (a unit: a rank, or a
    link for transfers; -1: none, never left out)."""

    def __init__(self, keys: Ints, unit: Ints) -> None:
        self.keys = compact(keys)
        self.unit = _narrow(np.maximum(unit, 0))
        self.middle = Grouped(keys, MIDDLE)
        self.lower = self.middle.by(LOWER)
        self.paired = (self.middle.sizes() >= 2) & (unit >= 0)
        self._kept: tuple[bytes, tuple[npt.NDArray[np.bool_], Grouped] | None] | None = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_kept": None}  # (a cache: not in a snapshot)

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update({"_kept": None, **state})  # (a snapshot made before the cache: without it)

    def deviations(self, values: Floats, middle: Floats | None = None) -> tuple[Floats, Floats]:
        """Per unit: the sum over its paired positions of their group's middle times the sign of their
        deviation from it, and of the squared middles of those not tied with it (``middle``: each position's
        group middle, ``self.middle.typical(values)``, when already known)."""
        middle = self.middle.typical(values) if middle is None else middle
        units = int(self.unit.max(initial=-1)) + 1
        if _DEVIATIONS and native.core is not None:  # (the same sums, in one pass over the positions)
            sums = np.zeros(units), np.zeros(units)
            f64 = (np.ascontiguousarray(a, np.float64) for a in (values, middle))
            native.core.unit_deviations(*f64, self.paired.view(np.uint8), self.unit, *sums)
            return sums
        judged = self.paired & np.isfinite(values) & np.isfinite(middle)  # (a NaN says nothing, for or against)
        sign = np.where(judged, np.sign(values - middle), 0.0)
        size = np.where(sign != 0, np.abs(middle), 0.0)
        total: Floats = np.bincount(self.unit, size * sign, minlength=units).astype(np.float64)
        squares: Floats = np.bincount(self.unit, size * size, minlength=units).astype(np.float64)
        return total, squares

    def typical(self, values: Floats, slow: Ints = NONE, middle: Floats | None = None) -> Floats:
        """``values`` with each grouped position at the middle of its group's members not on units ``slow``
        (``middle``: ``self.middle.typical(values)`` when already known, returned as the result when no unit
        is left out)."""
        without = self._without(slow)
        if without is None:
            return self.middle.typical(values) if middle is None else middle
        excluded, groups = without
        kept = groups.typical(values)
        per_key = np.full(int(self.keys.max()) + 1, np.nan)
        held = (self.keys >= 0) & ~excluded
        per_key[self.keys[held]] = kept[held]
        out = np.where(self.keys >= 0, per_key[np.maximum(self.keys, 0)], values)
        every = (self.keys >= 0) & np.isnan(out)  # a group of systematic ranks only: its lower median
        if every.any():
            out[every] = self.lower.typical(values)[every]
        return out

    def _without(self, slow: Ints) -> tuple[npt.NDArray[np.bool_], Grouped] | None:
        """The paired positions on units ``slow`` and the groups without them (None: none left out), kept for
        the last ``slow`` asked (a job's systematically slow units stay the same from step to step; none
        asked, as the what-if does between the steps asking the job's, leaves that one kept)."""
        if not len(slow):
            return None
        key = slow.dtype.str.encode() + slow.tobytes()
        if self._kept is not None and self._kept[0] == key:
            return self._kept[1]
        excluded = self.paired & np.isin(self.unit, slow)
        made = (excluded, Grouped(np.where(excluded, -1, self.keys), MIDDLE)) if excluded.any() else None
        self._kept = (key, made)
        return made


def _narrow(units: Ints) -> Ints:
    """Units (ranks, links, never negative: ``bincount`` and ``isin`` read them) as int16 when they fit, else
    as int32 when they fit: a column kept per structure, at a quarter of int64's memory."""
    return units.astype(np.int16) if int(units.max(initial=0)) < 2**15 else compact(units)


@dataclass
class Persistence:
    """A job's evidence, per unit (rank or link), over its last ``WINDOW`` analysed steps (kept between
    steps)."""

    steps: deque[tuple[Floats, Floats]] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def update(self, s: Floats, q: Floats) -> Ints:
        """Add a step's per-rank sums; the ranks systematically slow over the window (ascending)."""
        self.steps.append((s, q))
        z, tested = _window(list(self.steps))
        if not tested:
            return NONE
        return np.flatnonzero(z >= math.sqrt(2 * math.log(tested / ALPHA)))


def _window(steps: list[tuple[Floats, Floats]]) -> tuple[Floats, int]:
    """Per unit, its statistic over the steps: ``S / sqrt(Q)`` of its sums (0.0 where ``Q`` is not above 0);
    and how many units have ``Q`` above 0 (those tested)."""
    units = len(steps[-1][0])
    if _WINDOW and native.core is not None:
        z = np.empty(units)
        tested = native.core.window_z(steps, z)
        if tested is not None:  # (the same values, in one call; None: a step of another length or dtype)
            return z, tested
    total_s, total_q = _sums([a for a, _ in steps]), _sums([b for _, b in steps])
    tested_at = total_q > 0
    z = np.where(tested_at, total_s / np.sqrt(np.where(tested_at, total_q, 1.0)), 0.0)
    return z, int(np.count_nonzero(tested_at))


def _sums(steps: list[Floats]) -> Floats:
    """Per unit, its values summed over the steps in order (a unit a step does not have: nothing added). Of
    steps of one length (a job's usual window) the last row of their running sums: the same additions in the
    same order, in one call (but for the first, added to nothing rather than to 0.0: only the sign of a zero
    sum can differ, which the test reads as no evidence either way)."""
    units = max(len(a) for a in steps)
    if all(len(a) == units for a in steps):
        last: Floats = np.add.accumulate(np.array(steps), axis=0)[-1]
        return last
    total = np.zeros(units)
    for a in steps:
        total[: len(a)] += a
    return total


@dataclass
class Systematic:
    """A job's systematically slow ranks and links, from its analysed steps (kept between steps)."""

    ranks: Persistence = field(default_factory=Persistence)
    links: Persistence = field(default_factory=Persistence)

    def update(self, evidence: tuple[tuple[Floats, Floats], tuple[Floats, Floats]]) -> Slow:
        """Add a step's evidence (``Peers.deviations``); the ranks and links slow over the window."""
        return self.ranks.update(*evidence[0]), self.links.update(*evidence[1])
