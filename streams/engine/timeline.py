"""Event time: telemetry samples and control decisions merged by event time behind a watermark.

The engine sees its input as a sequence of **epochs** of ``epoch_s`` seconds of event time, on a fixed grid
(epoch ``k`` holds the event times ``[k·epoch_s, (k+1)·epoch_s)``). Inside an epoch the samples of each kind
are in a canonical order (sorted by every column, event time first) and each decision comes before the
samples at or after its time. So what the engine is given depends on the input's content only: not on how
samples were batched into messages, nor on how the telemetry and decision topics interleaved.

An epoch is released once the **watermark** passes its end. Each input channel (a topic partition, a file)
has its own newest event time; the watermark is the oldest of them less ``lateness``, so a channel that is
behind holds everything back instead of seeing its data declared late. A channel the driver knows to be
caught up (nothing more to read right now) does not hold the watermark back; when every channel is, the
channels of samples hold each other back (as a replay reading them would) but a channel of decisions, quiet
since its last decision, does not. A sample or decision older
than the released frontier is **late**: the caller dead-letters it (reason ``late``), nothing is dropped
silently. At the end of the input :meth:`Timeline.drain` releases everything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native
from streams.contract.envelope import SampleBatch
from streams.contract.schema import EVENT_TIME
from streams.engine.codes import same_str

KIND_ORDER = ("topology", "op", "step", "metric")  # within a chunk: placements first, then what they place
Origin = tuple[str, int]  # (channel, offset) of an input message
FEW_TIED = 64  # up to this many rows of equal event times are ordered by all columns in one sort
_NATIVE_SORT = hasattr(native.core, "canonical_order")  # (an extension built before it: the definition)
_NATIVE_GATHER = hasattr(native.core, "canonical_gather")  # (the same, joined and gathered in the same call)
_NATIVE_EPOCHS = hasattr(native.core, "epoch_runs")  # (a batch's rows per epoch)
_NATIVE_KINDS = {"<f8": "f", "<i8": "i", "|b1": "b", "O": "s"}  # dtypes the native sort reads, as it names them


@dataclass(frozen=True)
class Chunk:
    """What the engine processes at once: samples in canonical order (one batch per kind, ``KIND_ORDER``),
    or one decision."""

    batches: tuple[SampleBatch, ...] = ()
    decision: dict[str, Any] | None = None


@dataclass
class _Epoch:
    parts: dict[str, list[SampleBatch]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    origin: Origin = ("", -1)  # the contributing message last in (channel, offset) order
    first: dict[str, int] = field(default_factory=dict)  # channel -> its first message contributing

    def contributed(self, origin: Origin) -> None:
        self.origin = max(self.origin, origin)
        channel, offset = origin
        if offset < self.first.get(channel, offset + 1):
            self.first[channel] = offset


@dataclass
class Timeline:
    lateness: float = 10.0
    epoch_s: float = 1.0
    _newest: dict[str, float] = field(default_factory=dict)  # channel -> newest event time seen
    _deciding: set[str] = field(default_factory=set)  # channels that delivered decisions
    _epochs: dict[int, _Epoch] = field(default_factory=dict)
    _released: int | None = None  # epochs below this index were released
    origin: Origin = ("", -1)  # of the epoch released last: the provenance of what the engine emits from it

    def declare(self, channels: Iterable[str]) -> None:
        """Channels that exist before they deliver anything (they hold the watermark back until they do)."""
        for c in channels:
            self._newest.setdefault(c, -math.inf)

    def heard(self, channel: str, time: float) -> None:
        """``channel`` has come to ``time`` without samples to show for it (a mark, :mod:`streams.shared`)."""
        self._newest[channel] = max(self._newest.get(channel, -math.inf), time)

    def newest(self, channel: str) -> float:
        """The newest event time ``channel`` has delivered (-inf: none yet)."""
        return self._newest.get(channel, -math.inf)

    def pending(self) -> dict[str, int]:
        """Per channel, the offset of the first message with samples or decisions still buffered: re-reading
        each channel from there rebuilds the buffer (:meth:`without_buffer`)."""
        first: dict[str, int] = {}
        for epoch in self._epochs.values():
            for channel, offset in epoch.first.items():
                first[channel] = min(offset, first.get(channel, offset))
        return first

    def without_buffer(self) -> Timeline:
        """This timeline with nothing buffered (its channels' times and released frontier kept): what a
        snapshot keeps; re-adding the messages from :meth:`pending` on refills it as it was."""
        return replace(self, _newest=dict(self._newest), _epochs={})

    def forget(self, channel: str) -> None:
        """A channel that has ended (a file read to its end, a replayed partition read to its range's end):
        it delivers nothing more, so it stops holding the watermark."""
        self._newest.pop(channel, None)

    @property
    def frontier(self) -> float:
        """Event times below this were released: anything older that arrives now is late."""
        return -math.inf if self._released is None else self._released * self.epoch_s

    def watermark(self, caught_up: Iterable[str] = ()) -> float:
        idle = set(caught_up)
        waiting = [t for c, t in self._newest.items() if c not in idle]
        if waiting:
            return min(waiting) - self.lateness
        # every channel is caught up: the channels of samples hold each other back as a replay reads them (the
        # oldest), but not a channel of decisions, quiet since its last one (it would hold back every release
        # while the worker keeps up in real time); only decisions: the newest of them
        sampled = [t for c, t in self._newest.items() if c not in self._deciding and t > -math.inf]
        if sampled:
            return min(sampled) - self.lateness
        return max(self._newest.values(), default=-math.inf) - self.lateness

    def add_samples(self, channel: str, batches: list[SampleBatch], offset: int = -1) -> list[npt.NDArray[np.bool_]]:
        """Buffer a message's sample batches (``offset``: the message's, in its channel); per batch, which
        samples were late (not buffered)."""
        masks = self.buffer_samples(channel, batches, offset)
        return [np.zeros(len(b), np.bool_) if late is None else late for b, late in zip(batches, masks, strict=True)]

    def buffer_samples(
        self, channel: str, batches: list[SampleBatch], offset: int = -1
    ) -> list[npt.NDArray[np.bool_] | None]:
        """:meth:`add_samples`, None for a batch with nothing late (the usual batch: no mask made and looked
        at again)."""
        frontier = self.frontier
        masks: list[npt.NDArray[np.bool_] | None] = []
        newest = self._newest.get(channel, -math.inf)
        for batch in batches:
            ends = batch.time_bounds()
            times = None  # (made only when rows are looked at: the usual batch is told by its ends)
            if ends is None and len(batch):  # (an object column: its values as floats)
                times = _times(batch)
                ends = float(times.min()), float(times.max())
            if ends is not None and ends[0] >= frontier:  # the usual message: nothing late
                masks.append(None)
                kept, (low, high) = batch, ends
            else:
                times = _times(batch) if times is None else times
                late = times < frontier
                masks.append(late)
                if late.all():  # nothing to buffer (also: an empty batch)
                    continue
                kept = batch if not late.any() else batch.select(~late)  # (batches are never changed in place)
                times = times if kept is batch else times[~late]
                low, high = float(times.min()), float(times.max())
            newest = max(newest, high)
            if (
                math.isfinite(low)
                and math.isfinite(high)
                and (math.floor(low / self.epoch_s) == math.floor(high / self.epoch_s))
            ):  # the usual message: one epoch, buffered without a copy
                self._buffer(math.floor(low / self.epoch_s), kept, channel, offset)
                continue
            for k, part in _by_epoch(kept, _times(kept) if times is None else times, self.epoch_s):
                self._buffer(k, part, channel, offset)
        self._newest[channel] = newest
        return masks

    def _buffer(self, k: int, part: SampleBatch, channel: str, offset: int) -> None:
        epoch = self._epoch(k)
        epoch.parts.setdefault(part.kind, []).append(part)
        epoch.contributed((channel, offset))

    def _epoch(self, k: int) -> _Epoch:
        """Epoch ``k``'s buffer, made when it has none (not one made per message and dropped: ``setdefault``)."""
        epoch = self._epochs.get(k)
        if epoch is None:
            epoch = self._epochs[k] = _Epoch()
        return epoch

    def add_decision(self, channel: str, decision: dict[str, Any], offset: int = -1) -> bool:
        """Buffer a decision; False if it is late (not buffered)."""
        t = float(decision["time"])
        if t < self.frontier:
            return False
        self._newest[channel] = max(self._newest.get(channel, -math.inf), t)
        self._deciding.add(channel)
        epoch = self._epoch(math.floor(t / self.epoch_s))
        epoch.decisions.append(decision)
        epoch.contributed((channel, offset))
        return True

    def release(self, caught_up: Iterable[str] = ()) -> Iterator[tuple[float, list[Chunk]]]:
        """The epochs the watermark has passed, oldest first: (epoch end, its chunks)."""
        watermark = self.watermark(caught_up)
        if watermark == -math.inf:
            return
        limit = math.floor(watermark / self.epoch_s)  # epochs below this index are complete
        yield from self._take(limit)

    def drain(self) -> Iterator[tuple[float, list[Chunk]]]:
        """Everything buffered (the end of the input)."""
        yield from self._take(max(self._epochs, default=-1) + 1)

    def _take(self, limit: int) -> Iterator[tuple[float, list[Chunk]]]:
        for k in sorted(k for k in self._epochs if k < limit):
            epoch = self._epochs.pop(k)
            self._released, self.origin = k + 1, epoch.origin
            yield (k + 1) * self.epoch_s, _chunks(epoch)
        if self._released is None or limit > self._released:
            self._released = limit


def _times(batch: SampleBatch) -> npt.NDArray[np.float64]:
    return np.asarray(batch.columns[EVENT_TIME[batch.kind]], np.float64)


def _by_epoch(batch: SampleBatch, times: npt.NDArray[np.float64], epoch_s: float) -> Iterator[tuple[int, SampleBatch]]:
    """A batch's rows per epoch, epochs in increasing order, each one's rows in their order in the batch. A
    message's rows usually come in event-time order: then each epoch's rows are a slice of the batch (views, no
    copy); otherwise one stable sort by epoch gathers each column once, and the epochs are slices of that
    (rows never move to Python, whatever their number; a gather per column, not per column and epoch). The
    native core tells the epochs and runs in one call (``native/src/epochs.rs``) where every epoch is a plain
    int64."""
    told = native.core.epoch_runs(times, epoch_s) if _NATIVE_EPOCHS else None  # type: ignore[union-attr]
    if told is not None:
        order, runs = told
        if order is not None:
            batch = batch.select(np.frombuffer(order, np.int64))
        for k, start, end in runs:
            yield k, batch.select(slice(start, end))  # type: ignore[arg-type]
        return
    epochs = np.floor(times / epoch_s).astype(np.int64)
    if not (epochs[1:] >= epochs[:-1]).all():
        order = np.argsort(epochs, kind="stable")
        batch, epochs = batch.select(order), epochs[order]
    starts = [0, *(np.flatnonzero(epochs[1:] != epochs[:-1]) + 1).tolist()]
    for start, end in zip(starts, [*starts[1:], len(epochs)], strict=True):
        yield int(epochs[start]), batch.select(slice(start, end))  # type: ignore[arg-type]


def _chunks(epoch: _Epoch) -> list[Chunk]:
    batches = {}
    while epoch.parts:  # each kind's buffered parts are let go of as its canonical batch is made
        kind, parts = epoch.parts.popitem()
        batches[kind] = canonical(kind, parts, consume=True)
    times = {kind: np.asarray(b.columns[EVENT_TIME[kind]], np.float64) for kind, b in batches.items()}
    cut = dict.fromkeys(batches, 0)
    chunks = []
    for d in sorted(epoch.decisions, key=lambda d: (float(d["time"]), str(d["id"]))):
        before = _slices(batches, times, cut, float(d["time"]))
        if before:
            chunks.append(Chunk(before))
        chunks.append(Chunk(decision=d))
    rest = _slices(batches, times, cut, math.inf)
    if rest:
        chunks.append(Chunk(rest))
    return chunks


def _slices(
    batches: dict[str, SampleBatch], times: dict[str, npt.NDArray[np.float64]], cut: dict[str, int], until: float
) -> tuple[SampleBatch, ...]:
    """Per kind (in ``KIND_ORDER``), the rows from ``cut`` up to event time ``until`` (exclusive); a kind's
    whole batch as it is (an epoch without decisions: no view made of each column)."""
    out = []
    for kind in (k for k in KIND_ORDER if k in batches):
        end = int(np.searchsorted(times[kind], until, side="left")) if until != math.inf else len(times[kind])
        start, cut[kind] = cut[kind], end
        if end > start:
            whole = start == 0 and end == len(times[kind])
            out.append(batches[kind] if whole else batches[kind].select(slice(start, end)))  # type: ignore[arg-type]
    return tuple(out)


def canonical(kind: str, parts: list[SampleBatch], consume: bool = False) -> SampleBatch:
    """One batch of ``parts``, its rows sorted by event time, then by every other column: the same rows in
    the same order however they were split into messages. ``index`` (a position in a message) is dropped.
    ``consume``: ``parts`` is emptied once read, and each column let go of once gathered, so that an epoch's
    rows are held about once at a time, not three times (parts, joined, ordered).

    Sorting by event time alone settles most rows; only the runs of rows with equal event times are then
    ordered by the other columns (:func:`_settle_ties`), which gives the order a sort by every column gives.
    A column of one value in every row (a job's name, an unused field) is the same in any order: once
    joined, it is neither compared nor gathered (told on the joined column: one comparison, not one per
    part and column)."""
    names = sorted(parts[0].columns)
    gathered = _native_canonical(kind, names, parts) if _NATIVE_GATHER and _NATIVE_SORT else None
    if gathered is not None:
        if consume:
            parts.clear()
        return gathered
    if len(parts) > 1:
        cols = {n: np.concatenate([p.columns[n] for p in parts]) for n in names}
    else:
        cols = dict(parts[0].columns)
    if consume:
        parts.clear()
    time = EVENT_TIME[kind]
    n = len(cols[time])
    if n > 1:
        times = np.asarray(cols[time], np.float64)
        varying = [name for name in names if name == time or not _one_value(cols[name])]
        others = [name for name in varying if name != time]
        order = _native_order(times, [cols[name] for name in others])
        if order is None:
            order = np.argsort(times, kind="stable")
            ordered = times[order]
            tied = (ordered[1:] == ordered[:-1]) | (np.isnan(ordered[1:]) & np.isnan(ordered[:-1]))
            if tied.any():
                _settle_ties(order, tied, cols, varying)
        for name in varying:
            cols[name] = cols.pop(name)[order]
    return SampleBatch(kind, np.arange(n, dtype=np.int64), {k: cols[k] for k in names})


def _native_canonical(kind: str, names: list[str], parts: list[SampleBatch]) -> SampleBatch | None:
    """:func:`canonical` from the native core's one call (``native/src/sort.rs``), which joins the parts,
    orders their rows and gathers every column, instead of numpy calls per column (most of an epoch's cost
    at a few ranks). Columns of one value are ordered and gathered too: they compare equal in every row, and
    any order writes them out alike. None where it does not apply (fewer than two rows, more than
    ``NATIVE_GATHER_ROWS``, a column of a type it does not read) or tells the definition to decide (a part's
    column not contiguous, or of another type than the layout's, a string column holding something else than
    ``str``)."""
    time = EVENT_TIME[kind]
    n = sum(len(p.columns[time]) for p in parts)
    layout = _gathered_layout(kind, names, parts[0]) if 1 < n <= NATIVE_GATHER_ROWS else None
    if layout is None:
        return None
    order, kinds, dtypes = layout
    outs = [np.empty(n, d) for d in dtypes]
    assert native.core is not None
    if not native.core.canonical_gather([p.columns for p in parts], order, kinds, outs):
        return None
    gathered = dict(zip(order, outs, strict=True))
    return SampleBatch(kind, np.arange(n, dtype=np.int64), {name: gathered[name] for name in names})


# above this many rows an epoch is joined by the definition: the native call holds the parts, its copy of
# every column and the output at once (the definition, consuming, about once), and its gain is a fixed cost
NATIVE_GATHER_ROWS = 1 << 16
Gathered = tuple[list[str], str, list[np.dtype[Any]]]  # the columns (event time first), their kinds and types
_LAYOUTS: dict[tuple[str, ...], Gathered] = {}
MAX_LAYOUTS = 64  # (the contract's kinds and optional columns make a few; more are made again)


def _gathered_layout(kind: str, names: list[str], first: SampleBatch) -> Gathered | None:
    """The columns as the native call takes them, made once per kind, set of columns and their types in
    ``first`` (a later part of other types is told natively and left to the definition); None, not kept,
    when a column of ``first`` is of a type it does not read."""
    key = (kind, *names, *(first.columns[name].dtype.str for name in names))  # (other types: another layout)
    layout = _LAYOUTS.get(key)
    if layout is None:
        time = EVENT_TIME[kind]
        order = [time, *(name for name in names if name != time)]
        dtypes = [first.columns[name].dtype for name in order]
        kinds = "".join(_NATIVE_KINDS.get(d.str if d.kind != "O" else "O", "?") for d in dtypes)
        if "?" in kinds or kinds[0] != "f":
            return None
        if len(_LAYOUTS) >= MAX_LAYOUTS:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = (order, kinds, dtypes)
    return layout


def _one_value(values: npt.NDArray[Any]) -> bool:
    """Whether a column holds one value, in every row, that any order writes out alike (not a float column:
    -0.0 equals 0.0 without being it). Most columns of many values differ at their ends: told at once."""
    if not len(values) or values.dtype.kind not in "Obiu":
        return False
    value = values[0]
    if values.dtype.kind == "O" and type(value) is not str:  # (objects equal by == but not alike: 1, True, 1.0)
        return False
    if values[-1] != value:
        return False
    if values.dtype.kind == "O":  # (compared by their codes: a run of one object is looked up once)
        return same_str([values], value)
    return bool((values == value).all())


def _native_order(times: npt.NDArray[np.float64], others: list[npt.NDArray[Any]]) -> npt.NDArray[np.intp] | None:
    """The same order from the native core's one sort (``native/src/sort.rs``), which compares strings only
    between rows that tie on every column before; None where it is not built (``DRIFTLOG_NATIVE=0``) or a
    column is of a type it does not read (then :func:`_settle_ties`, the definition, orders them)."""
    if not _NATIVE_SORT:
        return None
    columns: list[Any] = []
    kinds = []
    for values in others:
        kind = _NATIVE_KINDS.get(values.dtype.str if values.dtype.kind != "O" else "O")
        if kind is None:
            return None
        kinds.append(kind)
        if kind == "s":
            columns.append(np.ascontiguousarray(values))  # (read in place: no list of its objects)
        else:
            columns.append(np.ascontiguousarray(values.view(np.uint8) if kind == "b" else values))
    order = np.empty(len(times), np.int64)
    assert native.core is not None
    if not native.core.canonical_order(np.ascontiguousarray(times), columns, "".join(kinds), order):
        return None  # a string column holds something else than str (ordered by its text: the definition)
    return order.astype(np.intp, copy=False)


def _settle_ties(
    order: npt.NDArray[np.intp], tied: npt.NDArray[np.bool_], cols: dict[str, npt.NDArray[Any]], names: list[str]
) -> None:
    """Reorder, in place, the runs of ``order`` whose event times are equal (``tied[i]``: position i+1 has
    the time of position i) by the other columns in ``names`` order (strings by value, NaN first). A few
    tied rows are ordered by every column in one sort; many, one column at a time, each over the rows the
    columns before it left tied only (usually few)."""
    if tied.sum() < FEW_TIED:
        member, run, rows = _tied_rows(order, tied)
        order[member] = rows[np.lexsort([*(_sort_key(cols[n][rows]) for n in reversed(names)), run])]
        return
    for name in names:
        member, run, rows = _tied_rows(order, tied)
        if not len(rows):
            return
        key = _sort_key(cols[name][rows])
        within = np.lexsort((key, run))
        order[member] = rows[within]
        key, run = key[within], run[within]
        tied = np.zeros(len(order) - 1, np.bool_)  # still equal: same run, same value in this column
        tied[np.flatnonzero(member)[:-1][(run[1:] == run[:-1]) & (key[1:] == key[:-1])]] = True


def _tied_rows(
    order: npt.NDArray[np.intp], tied: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The positions of ``order`` in a run of equal rows, the run of each, and their rows."""
    member = np.zeros(len(order), np.bool_)
    member[1:] |= tied
    member[:-1] |= tied
    run = np.cumsum(np.concatenate(([True], ~tied)))[member]
    return member, run, order[member]


def _sort_key(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A column as something np.lexsort orders: strings by their rank, NaN as -inf."""
    if values.dtype.kind in {"O", "U"}:
        listed = values.tolist()
        try:
            distinct = sorted(set(listed))
        except TypeError:  # not all str (e.g. None among them): by their text
            listed = [str(v) for v in listed]
            distinct = sorted(set(listed))
        rank = {v: i for i, v in enumerate(distinct)}
        return np.fromiter(map(rank.__getitem__, listed), np.int64, len(listed))
    if values.dtype.kind == "f" and np.isnan(values).any():
        filled: npt.NDArray[Any] = np.nan_to_num(values, nan=-np.inf)
        return filled
    return values
