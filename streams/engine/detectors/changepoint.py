"""A scale-free, two-sided, restarting change detector for many series at once (numpy, one row per series).

Per series it keeps the last ``window`` values of its current segment (the points since the last change).
Every update tests that window for one change, at every split with at least ``min_side`` points a side:

- **level or slope**: a line fitted to the whole window against two lines, one either side of the split
  (the generalised likelihood ratio, in units of the noise): a level shift, a change of slope, or both;
  a steady trend is one line, so it raises nothing once its start has been found;
- **variance**: the mean of ``log(d²)`` of the first differences ``d`` either side of the split; that
  mean moves by ``log(r²)`` when the noise is scaled by ``r``, and its spread is the known ``π²/2`` of a
  log chi-square, so this test needs no scale at all.

Scale-free: values are standardised by a robust noise estimate taken from the segment itself (the median
absolute deviation of its first differences, which neither a level nor a slope moves), never by
thresholds in data units or ratios, so negative, near-zero and huge series behave alike. Each value is
winsorised to ``clip`` noise units around the median of it and its neighbours, so a single outlier moves
a test by a bounded amount. False alarms are controlled by a threshold that grows with the segment's
length (``a + b·log n``: the more splits were tried, the more evidence a change needs).

On an alarm the change is located at the best split (not at the alarm), reported, and the detector
restarts from the points after it: they are the new segment, its noise is learned again from them once
there are ``warmup`` of them. State per series: two rows of ``window`` floats and a few scalars. A round
(the bookkeeping, the tests and their scores: the alarms) runs in the native core when it is built
(``native/src/change.rs``: the same state and alarms, bit for bit, in one call, without the numpy definition's
~40 calls of bookkeeping and ~20 a test, which made a round of a few series all call overhead); the noise is
learned, and the alarms reported, in Python.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
import numpy.typing as npt

from audit import native
from streams import fpmath
from streams.engine.detectors.lines import line
from streams.engine.detectors.rows import with_rows
from streams.engine.medians import median

F = npt.NDArray[np.float64]
I = npt.NDArray[np.int64]  # noqa: E741
T = TypeVar("T", bound=np.generic)
Terms = TypeVar("Terms", "_LineTerms", "_MeanTerms")  # what the tests take from the windows' lengths alone
Keep = Callable[["Change"], bool]  # which changes are reported

LOG_CHI2_VAR = math.pi**2 / 2  # variance of log(z²), z standard normal
MAD_TO_SIGMA = 1.4826 / math.sqrt(2)  # a difference of two points has √2 times the noise
CHUNK = 256  # series tested at once (their temporaries stay in the cache)


class _Alarm(NamedTuple):
    """A test over its threshold: the series' row, the last column of its old segment, the kind of change (as
    :class:`Change`'s) and the score."""

    row: int
    split: int
    kind: str
    score: float


KINDS = ("level", "slope", "variance")  # the kinds by the native core's codes


class Change(NamedTuple):
    """One change of one series: ``at`` is the first sample after the change (counted per series from
    0), ``detected`` the sample whose arrival raised it; ``before``/``after`` are the level (kind
    ``level``/``slope``: the fitted values either side of the split) or the noise (kind ``variance``) in
    data units; ``slope_before``/``slope_after`` in data units per sample; ``score`` the test statistic
    over its threshold (> 1)."""

    series: int
    at: int
    detected: int
    kind: str
    before: float
    after: float
    slope_before: float
    slope_after: float
    score: float

    @property
    def direction(self) -> str:
        if self.kind == "slope":
            return "up" if self.slope_after > self.slope_before else "down"
        return "up" if self.after > self.before else "down"


@dataclass
class ChangePoint:
    """``update(rows, values)`` appends one value to each listed series (rows unique within a call) and
    returns the changes found. ``grow(n)`` adds series. Defaults were set on stationary Gaussian noise for
    about one false alarm per 100k points per test (see ``bench/bench_changepoint.py``), not on changes."""

    series: int = 0
    window: int = 128
    warmup: int = 20
    min_side: int = 5
    clip: float = 4.0
    line_a: float = 18.0  # level/slope threshold: line_a + line_b·log(n)
    line_b: float = 2.0
    var_a: float = 28.0  # variance threshold: var_a + var_b·log(n)
    var_b: float = 1.0
    every: int = 1  # test a series every this many of its samples (a change is found up to every - 1 later)
    _x: F = field(init=False, repr=False)
    _y: F = field(init=False, repr=False)  # log of squared first differences
    _n: I = field(init=False, repr=False)  # points in the current segment (the window holds the last ones)
    _seen: I = field(init=False, repr=False)  # samples of the series so far
    _sigma: F = field(init=False, repr=False)  # noise of the segment (NaN while it warms up)
    _phase: I = field(init=False, repr=False)  # which of its samples a series is tested on (with every > 1)

    def __post_init__(self) -> None:
        count, self.series = self.series, 0
        self._x = np.zeros((0, self.window))
        self._y = np.zeros((0, self.window))
        self._n = np.zeros(0, np.int64)
        self._seen = np.zeros(0, np.int64)
        self._sigma = np.zeros(0)
        self._phase = np.zeros(0, np.int64)
        self.grow(count)

    def grow(self, count: int, phases: I | None = None) -> None:
        """Add ``count`` series (rows ``series .. series + count - 1``); with ``every`` > 1 a series is
        tested on the samples whose count plus its phase is a multiple of ``every`` (default phase: its row,
        which spreads the tests over calls; give phases that do not depend on the order series appeared in,
        e.g. a hash of their names, when that order may vary)."""
        self._x = with_rows(self._x, count)
        self._y = with_rows(self._y, count)
        self._n = with_rows(self._n, count)
        self._seen = with_rows(self._seen, count)
        self._sigma = with_rows(self._sigma, count, np.nan)
        rows = np.arange(self.series, self.series + count, dtype=np.int64)
        self._phase = with_rows(self._phase, count, rows if phases is None else np.asarray(phases, np.int64))
        self.series += count

    def keep(self, rows: I) -> None:
        """Only the series of ``rows`` (ascending), numbered from 0 in that order: the others get no more
        samples."""
        self._x, self._y, self._sigma = self._x[rows], self._y[rows], self._sigma[rows]
        self._n, self._seen, self._phase = self._n[rows], self._seen[rows], self._phase[rows]
        self.series = len(rows)

    def update(self, rows: I, values: F, keep: Keep | None = None) -> list[Change]:
        """The changes found; with ``keep``, only those it keeps (the others restart their series all the same,
        their slopes, which only a report reads, not fitted). ``rows``: each series once (a series sampled
        twice in a batch takes two calls, as :meth:`SeriesDrift._rounds` makes them)."""
        rows = np.asarray(rows, np.int64)
        values = np.asarray(values, np.float64)
        if rows.size == 1:  # one series (a job's step time, its output per step): Python numbers
            return self._update_one(int(rows[0]), float(values[0]), keep)
        ok = np.isfinite(values)
        if not ok.all():
            rows, values = rows[ok], values[ok]
        if rows.size == 0:
            return []
        return self._reported(self._round(rows, values), keep)

    def _round(self, rows: I, values: F) -> list[_Alarm]:
        """Each row's value appended (:meth:`_append`), the noise of those whose turn it is learned, those tested
        now tested: their alarms. In the native core when it is built: the whole round in one call when no series
        learns its noise (most rounds; the same values as the definition's ~40 numpy calls of bookkeeping, its
        logarithms :mod:`streams.fpmath`'s, and its ~20 calls a test)."""
        if native.core is None or not hasattr(native.core, "change_round"):
            n = self._append(rows, values)
            return self._alarms(self._ready(rows, n, rows[self._relearns(n, np.isnan(self._sigma[rows]))]))
        due, out = np.empty((2, rows.size), np.int64), np.empty((rows.size, 4))
        limits = (self.warmup, self.window, self.min_side, self.every)
        relearns, tests, alarms = native.core.change_round(self._x, self._y, self._n, self._seen, self._sigma,
                                                           self._phase, np.ascontiguousarray(rows),
                                                           np.ascontiguousarray(values), limits, self._scoring(), due,
                                                           out)  # fmt: skip
        if relearns:
            return self._alarms(self._ready(rows, self._n[rows], rows[due[0, :relearns]]))
        tested = rows[due[1, :tests]]
        return self._alarms(tested) if alarms < 0 else _decoded(tested, out[:alarms])

    def _reported(self, alarms: list[_Alarm], keep: Keep | None) -> list[Change]:
        """The changes of these alarms (:meth:`_report`), those ``keep`` keeps."""
        return [c for a in alarms if (c := self._report(a.row, a.split, a.kind, a.score, keep)) is not None]

    def _ready(self, rows: I, n: I, learning: I) -> I:
        """The rows tested now (``n``: their segments' lengths), once ``learning`` (some of them) learned their
        noise."""
        self._learn(learning)
        ready: I = rows[self._tested(n, np.isfinite(self._sigma[rows]), rows)]
        return ready

    def _update_one(self, row: int, value: float, keep: Keep | None) -> list[Change]:
        """:meth:`update` of one series, its bookkeeping in Python numbers (numpy's per-call overhead was most
        of its cost): the same steps, the same values."""
        if not math.isfinite(value):
            return []
        x, y, n = self._x[row], self._y[row], int(self._n[row])
        d = value - float(x[-1]) if n > 0 else math.nan
        # the C library's log, as :meth:`_append` takes it (:mod:`streams.fpmath`; of 0: -inf, as there)
        logged = -math.inf if d * d == 0.0 else math.log(d * d)
        x[:-1], x[-1] = x[1:], value
        y[:-1], y[-1] = y[1:], logged
        n += 1
        self._n[row] = n
        self._seen[row] += 1
        if self._relearns(n, math.isnan(self._sigma[row])):
            self._learn(np.array([row]))
        tested = self._tested(n, math.isfinite(self._sigma[row]), row)
        return self._reported(self._alarms(np.array([row])), keep) if tested else []

    def _relearns(self, n: Any, unlearned: Any) -> Any:
        """Whether each series (``n``: its segment's points, arrays or one series' numbers) learns its noise now:
        at ``warmup`` points, then as the segment doubles, then once per window (a longer segment, a better
        estimate)."""
        refresh = ((n & (n - 1)) == 0) & (n > self.warmup) & (n <= self.window) | (n % self.window == 0)
        return unlearned & (n >= self.warmup) | refresh

    def _tested(self, n: Any, finite: Any, rows: Any) -> Any:
        """Whether each series is tested now: its noise is known, its segment long enough, and (with ``every``
        > 1) it is its turn, which spreads the tests over calls."""
        tested = finite & (n >= 2 * self.min_side)
        if self.every > 1:
            tested = tested & ((self._seen[rows] + self._phase[rows]) % self.every == 0)
        return tested

    def _append(self, rows: I, values: F) -> I:
        """Each row's value appended to its window; the rows' new segment lengths."""
        x, n = self._x[rows], self._n[rows]
        d = np.where(n > 0, values - x[:, -1], np.nan)
        y = fpmath.log(d * d)
        self._x[rows, :-1] = x[:, 1:]
        self._x[rows, -1] = values
        self._y[rows, :-1] = self._y[rows, 1:]
        self._y[rows, -1] = y
        n = n + 1
        self._n[rows] = n
        self._seen[rows] += 1
        return n

    def _learn(self, rows: I) -> None:
        """The noise of each row's segment: the median absolute deviation of the first differences in its
        window (a level shift is one outlier among them, a slope moves their median, not their spread)."""
        if rows.size == 0:
            return
        rows = np.unique(rows)
        w = self.window
        k = np.minimum(self._n[rows], w)
        valid = np.arange(1, w)[None, :] > (w - k)[:, None]
        d = np.where(valid, np.diff(self._x[rows], axis=1), np.nan)
        with np.errstate(all="ignore"):
            dev = np.abs(d - _nanmedian_of_tails(d, k - 1)[:, None])
            mad = _nanmedian_of_tails(dev, k - 1)
            # quantised or constant data: the mean absolute deviation instead, then a floor far below
            mad = np.where(mad > 0, mad, np.nanmean(dev, axis=1) / 1.2533)
        level = np.abs(self._x[rows, -1])
        self._sigma[rows] = np.maximum(mad * MAD_TO_SIGMA, np.maximum(level, 1.0) * 1e-9)

    def _scoring(self) -> tuple[float, float, float, float, float, float]:
        """What the native core takes to score the tests (:meth:`_scored`)."""
        return self.clip, self.line_a, self.line_b, self.var_a, self.var_b, LOG_CHI2_VAR

    def _alarms(self, rows: I) -> list[_Alarm]:
        """The alarms of the tests of these rows (:meth:`_scored`): in the native core when it is built (the same
        alarms, its statistics and scores bit for bit, in one call instead of ~20 numpy calls a test)."""
        if rows.size and native.core is not None and hasattr(native.core, "change_alarms"):
            out = np.empty((rows.size, 4))
            found = native.core.change_alarms(self._x, self._y, self._n, self._sigma, np.ascontiguousarray(rows),
                                              self.min_side, self._scoring(), out)  # fmt: skip
            if found >= 0:
                return _decoded(rows, out[:found])
        # in chunks, so that the tests' temporaries (a dozen arrays of chunk x window) stay small
        return [a for i in range(0, rows.size, CHUNK) for a in self._scored(rows[i : i + CHUNK])]

    def _scored(self, rows: I) -> list[_Alarm]:
        """Both tests on these rows (:meth:`_statistics`), each over its threshold: the alarms (the definition)."""
        n_seg = self._n[rows]
        line, line_at, line_slope, var, var_at = self._statistics(rows, np.minimum(n_seg, self.window))
        # the scores in Python numbers, the same operations on the same doubles (a test takes a few
        # series: numpy's per-call cost was most of it)
        log_n = fpmath.log(n_seg).tolist()
        a, b, var_a, var_b = self.line_a, self.line_b, self.var_a, self.var_b
        alarms = []
        for i, (ln, line_i, var_i) in enumerate(zip(log_n, line.tolist(), var.tolist(), strict=True)):
            line_score = line_i / (a + b * ln)
            var_score = var_i / (var_a + var_b * ln) / LOG_CHI2_VAR
            if not (line_score > 1.0 or var_score > 1.0) or math.isnan(line_score) or math.isnan(var_score):
                continue  # no alarm (np.maximum of the two over 1: a NaN in either is none)
            by_line = line_score >= var_score
            split = int(line_at[i] if by_line else var_at[i])  # last column of the old segment
            kind = ("slope" if line_slope[i] else "level") if by_line else "variance"
            alarms.append(_Alarm(int(rows[i]), split, kind, max(line_score, var_score)))
        return alarms

    def _statistics(self, rows: I, k: I) -> tuple[F, I, npt.NDArray[np.bool_], F, I]:
        """Per row (``k``: its window's valid length): the line test's statistic, its split and whether a
        slope change is best, and the variance test's statistic and split (the definition of the native
        core's, :meth:`_alarms`): computed time-major (window × rows: the prefix sums run along contiguous
        memory)."""
        w, m = self.window, self.min_side
        sigma = self._sigma[rows]
        floor, top = 2 * fpmath.log(1e-2 * sigma), 2 * fpmath.log(6 * sigma)
        cols = np.arange(w)[:, None]
        valid = cols >= (w - k)[None, :]
        x = _winsorise(np.ascontiguousarray(self._x[rows].T), valid, self.clip * sigma)
        z = np.where(valid, (x - x[-1:]) / sigma[None, :], 0.0)
        line, line_at, line_slope = _line_glr(z, valid, k, m)
        y_valid = cols > (w - k)[None, :]  # the first point of a segment has no difference
        y = _clip(np.ascontiguousarray(self._y[rows].T), floor[None, :], top[None, :])
        var, var_at = _mean_glr(np.where(y_valid, y, 0.0), y_valid, m)
        return line, line_at, line_slope, var, var_at

    def _report(self, row: int, split: int, kind: str, score: float, keep: Keep | None) -> Change | None:
        w = self.window
        k = int(min(self._n[row], w))
        left, right = self._x[row, w - k : split + 1], self._x[row, split + 1 :]
        noise_l, noise_r = _noise(left), _noise(right)
        if kind == "level" and max(noise_l, noise_r) >= 2 * min(noise_l, noise_r):
            jump = abs(median(right) - median(left[-len(right) :]))
            if jump < 3 * max(noise_l, noise_r):
                kind = "variance"  # the new noise's first excursions, not a step: the levels hardly differ
        fits = None
        if kind == "level":  # the median either side: a few points after a step do not make a slope
            before, after = median(left[-max(len(right), self.warmup) :]), median(right)
        elif kind == "slope":  # the left line at its last point, the right one half a step before its first
            fits = _fit(left, len(left) - 1), _fit(right, -0.5)
            before, after = fits[0][1], fits[1][1]
        else:
            before, after = noise_l, noise_r
        seen = int(self._seen[row])
        change = Change(row, seen - len(right), seen - 1, kind, float(before), float(after), math.nan, math.nan, score)
        kept = keep is None or keep(change)
        if kept:
            (lb, _), (rb, _) = fits or (_fit(left, len(left) - 1), _fit(right, -0.5))
            change = change._replace(slope_before=lb, slope_after=rb)
        self._restart(row, len(right))
        return change if kept else None

    def restart(self, rows: I) -> None:
        """These series start a new, empty segment (what came before says nothing of what comes next)."""
        self._n[rows] = 0
        self._sigma[rows] = np.nan

    def _restart(self, row: int, keep: int) -> None:
        """The points after the split become the new segment; their noise is learned anew."""
        self._n[row] = keep
        self._sigma[row] = np.nan
        if keep >= self.warmup:
            self._learn(np.array([row]))

    def level(self, rows: I) -> F:
        """The median of each series' current window (NaN before its first value)."""
        w = self.window
        k = np.minimum(self._n[rows], w)
        x = np.where(np.arange(w)[None, :] >= (w - k)[:, None], self._x[rows], np.nan)
        with np.errstate(all="ignore"):
            out: F = np.nanmedian(x, axis=1) if x.size else np.zeros(0)
        return out


def _nanmedian_of_tails(a: F, count: I) -> F:
    """``np.nanmedian(a, axis=1)``, the same values, of rows whose values are their last ``count`` (NaN before
    them): ``np.median`` of the rows of each count at once, without nanmedian's masked-array path for small
    inputs or its loop over rows (a row holding another NaN goes to ``np.nanmedian``)."""
    out = np.empty(a.shape[0])
    for c in np.unique(count).tolist():
        pick = count == c
        tail = a[pick, a.shape[1] - c :]
        with np.errstate(all="ignore"):
            out[pick] = np.median(tail, axis=1) if c > 0 and not np.isnan(tail).any() else np.nanmedian(a[pick], axis=1)
    return out


def _winsorise(x: F, valid: npt.NDArray[np.bool_], bound: F) -> F:
    """Each value (time-major: window × series) clipped to ``bound`` around the median of itself and its
    two neighbours (the newest: of itself and the two before it). A lone outlier is cut down; a step is
    not (its neighbours follow it)."""
    before, after = _shifted(x, 1), _shifted(x, -1)  # (np.roll, without its per-call overhead)
    after[-1] = x[-3]
    first = valid & ~_shifted(valid, 1)
    before = np.where(first, after, before)  # the oldest value: its two successors
    med = _clip(x, np.minimum(before, after), np.maximum(before, after))
    return _clip(x, med - bound[None, :], med + bound[None, :])


def _clip(x: F, low: F, high: F) -> F:
    """``np.clip`` (the same values: it only picks one of its inputs), without its per-call overhead."""
    out: F = np.minimum(np.maximum(x, low), high)
    return out


def _shifted(a: npt.NDArray[T], by: int) -> npt.NDArray[T]:
    """``np.roll(a, by, axis=0)`` for ``by`` of 1 or -1."""
    out = np.empty_like(a)
    if by == 1:
        out[1:], out[:1] = a[:-1], a[-1:]
    else:
        out[:-1], out[-1:] = a[1:], a[:1]
    return out


def _line_glr(z: F, valid: npt.NDArray[np.bool_], k: I, m: int) -> tuple[F, I, npt.NDArray[np.bool_]]:
    """Residuals of each series (time-major: window × series) against one line through its window, and
    the best split for a level shift (a step added after the split) or a change of slope (a hinge added
    there), one degree of freedom each: (reduction of the squared residuals in noise units, last index of
    the left side, whether a slope change is best)."""
    c = _per_column(_line_terms, z.shape[0], k, m)
    t, n, st, grid = c.t, c.n, c.st, c.grid
    z_sum = _column_sums(z)
    slope = (n * _column_sums(t * z) - st * z_sum) / c.det
    e = np.where(valid, z - ((z_sum - slope * st) / n)[None, :] - slope[None, :] * t, 0.0)
    sse = _column_sums(e * e)
    e_r = -np.cumsum(e, axis=0)  # the residuals sum to zero
    te_r = -np.cumsum(t * e, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = e_r * e_r / c.level_den
        he = te_r - grid * e_r
        bend = he * he / c.bend_den
    # the best split over every step, also those too recent to be confirmed (a step in the newest points
    # would else be placed earlier, where it has enough points after it); a slope change must beat them all
    # (a fresh step also looks like a steep hinge) and have a longer arm
    level = np.where(c.level_ok & np.isfinite(level), level, -np.inf)
    bend = np.where(c.bend_ok & np.isfinite(bend), bend, -np.inf)
    gain = np.maximum(level, bend)
    at: I = np.argmax(gain, axis=0)
    pick = np.arange(gain.shape[1])
    best = gain[at, pick]
    is_slope = bend[at, pick] > level[at, pick]
    best = np.where(c.confirmed[at, pick if c.confirmed.shape[1] > 1 else 0], best, 0.0)
    # in units of the larger of two noise estimates: the robust one the values were scaled by (1), and the
    # residual variance with the change fitted (a noise estimate learned from few points can be too small)
    residual = np.maximum((sse - best) / np.maximum(k - 3, 1), 1.0)
    return best / residual, at, is_slope


def _column_sums(a: F) -> F:
    """Each column's sum, added row after row whatever the number of columns (``sum(axis=0)`` adds a lone
    column pairwise, so a series' sums would depend on which series are tested with it)."""
    out: F = a.sum(axis=0) if a.shape[1] > 1 else np.add.accumulate(a, axis=0)[-1]
    return out


class _LineTerms(NamedTuple):
    """What :func:`_line_glr` takes from the windows' valid lengths ``k`` alone, not from the values (time-major,
    a column per series, or one column for all when they have the same ``k``)."""

    grid: F  # w x 1: the position i / w - 0.5 of each index
    t: F  # the positions of the valid indices, 0 elsewhere
    n: F  # the whole window's Gram terms: count, sum of positions, determinant
    st: F
    det: F
    level_den: F  # per split: the denominators of the level and slope gains
    bend_den: F
    level_ok: npt.NDArray[np.bool_]  # per split: enough points either side for a level shift, a slope change
    bend_ok: npt.NDArray[np.bool_]
    confirmed: npt.NDArray[np.bool_]  # enough points after the split


def _line_terms(w: int, k: I, m: int) -> _LineTerms:
    grid = np.arange(w, dtype=np.float64)[:, None] / w - 0.5
    t = np.where(np.arange(w)[:, None] >= (w - k)[None, :], grid, 0.0)
    n_left, st_left, stt_left = _closed_form(w, k)
    n, st, stt = k.astype(np.float64), st_left[-1], stt_left[-1]
    det = n * stt - st * st

    def explained(v1: F, v2: F) -> F:  # v·G⁻¹·v, G the Gram matrix of (1, t) over the window
        out: F = (stt * v1 * v1 - 2 * st * v1 * v2 + n * v2 * v2) / det
        return out

    n_r = n - n_left
    st_r = st - st_left
    stt_r = stt - stt_left
    h, ht, hh = st_r - grid * n_r, stt_r - grid * st_r, stt_r - 2 * grid * st_r + grid * grid * n_r
    with np.errstate(divide="ignore", invalid="ignore"):
        level_den, bend_den = n_r - explained(n_r, st_r), hh - explained(h, ht)
    left_ok = n_left >= m
    return _LineTerms(grid, t, n, st, det, level_den, bend_den, left_ok & (n_r >= 1), left_ok & (n_r >= 2 * m),
                      n_r >= m)  # fmt: skip


def _closed_form(w: int, k: I) -> tuple[F, F, F]:
    """For each index j of a window of ``w`` whose last ``k`` are valid (time-major): the count, the sum
    and the sum of squares of the positions ``i / w - 0.5`` of the valid indices up to j (closed form: the
    prefix sums the tests need, without a pass over the data)."""
    first = (w - k)[None, :].astype(np.float64)
    j = np.maximum(np.arange(w, dtype=np.float64)[:, None], first - 1)
    count = j - first + 1
    total = (first + j) * count / 2  # of the indices i
    squares = (j * (j + 1) * (2 * j + 1) - (first - 1) * first * (2 * first - 1)) / 6
    return count, total / w - 0.5 * count, squares / (w * w) - total / w + 0.25 * count


def _mean_glr(y: F, valid: npt.NDArray[np.bool_], m: int) -> tuple[F, I]:
    """Best split of each series (time-major) into two means: (n_l·n_r/n · (mean_l - mean_r)², last index
    of the left side)."""
    c = _per_column(_mean_terms, y.shape[0], valid.sum(axis=0), m)
    s_left = np.cumsum(y, axis=0)
    s_right = s_left[-1:] - s_left
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = s_left / c.n_left - s_right / c.n_right
        stat = c.weight * diff * diff
    stat = np.where(c.ok, stat, -np.inf)
    at: I = np.argmax(stat, axis=0)
    return stat[at, np.arange(stat.shape[1])], at


class _MeanTerms(NamedTuple):
    """What :func:`_mean_glr` takes from the count of valid points alone (per split, time-major): the points
    either side, the weight n_l·n_r/n, and whether both sides have enough."""

    n_left: F
    n_right: F
    weight: F
    ok: npt.NDArray[np.bool_]


def _per_column(closed: Callable[[int, I, int], Terms], w: int, k: I, m: int) -> Terms:
    """``closed(w, k, m)``, kept per value of ``k`` (one column for all series when they have the same, the
    usual case: every long segment's ``k`` is ``w``): the same values, element for element."""
    if (k == k[0]).all():
        return cast(Terms, _kept(closed, w, int(k[0]), m))
    return closed(w, k, m)


@functools.lru_cache(maxsize=1024)
def _kept(closed: Callable[[int, I, int], Terms], w: int, k: int, m: int) -> tuple[F | npt.NDArray[np.bool_], ...]:
    """``closed`` of one ``k`` (one column, read-only: shared by every call)."""
    out = closed(w, np.array([k], np.int64), m)
    for a in out:
        a.flags.writeable = False
    return out


def _mean_terms(w: int, count: I, m: int) -> _MeanTerms:
    n_left = np.maximum(np.arange(1, w + 1, dtype=np.float64)[:, None] - (w - count)[None, :], 0.0)
    n = n_left[-1:]
    n_right = n - n_left
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = n_left * n_right / n
    return _MeanTerms(n_left, n_right, weight, (n_left >= m) & (n_right >= m))


def _fit(x: F, at: float) -> tuple[float, float]:
    """(slope, value at position ``at``) of the least-squares line through ``x`` (positions 0, 1, ...)."""
    if len(x) < 2:
        return 0.0, float(x[0]) if len(x) else math.nan
    slope, mean = line(x)
    return float(slope), float(mean + slope * (at - (len(x) - 1) / 2))


def _noise(x: F) -> float:
    d = np.diff(x)
    return median(np.abs(d - median(d))) * MAD_TO_SIGMA if len(d) else math.nan


def _decoded(rows: I, out: F) -> list[_Alarm]:
    """The native core's alarms (rows of: position in ``rows``, split, kind's code, score)."""
    return [_Alarm(int(rows[int(i)]), int(at), KINDS[int(kind)], score) for i, at, kind, score in out.tolist()]
