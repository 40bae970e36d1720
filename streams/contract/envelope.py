"""Decode one telemetry message into per-kind column batches and precise rejections; never raises.

Sample positions (``Reject.index``, ``SampleBatch.index``) count the row-wise ``samples`` first, then
the rows of each ``columns`` batch in order. Every sample of a message is either in a batch or rejected.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from streams.contract.columns import MISSING, Checked, check_column
from streams.contract.fast import MAX_COLUMN_BATCHES, MAX_COLUMN_ROWS, MAX_SEQ, decode_fast
from streams.contract.native_decode import Decoded as NativeDecoded
from streams.contract.native_decode import decode_native
from streams.contract.schema import EVENT_TIME, SAMPLE_KINDS, TELEMETRY_SCHEMA, sample_rules

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_SAMPLES = MAX_COLUMN_ROWS
FEW_ROWS = 32  # a batch of up to this many rows: its event times told as Python numbers


@dataclass(frozen=True)
class Reject:
    """Why (part of) a message was refused. ``index`` is the sample's position, None for the whole message."""

    reason: str
    detail: str
    index: int | None = None


@dataclass
class SampleBatch:
    """Valid samples of one kind as columns (numpy arrays; strings as object arrays)."""

    kind: str
    index: npt.NDArray[np.int64]
    columns: dict[str, npt.NDArray[Any]]

    def __len__(self) -> int:
        return len(self.index)

    def select(self, rows: npt.NDArray[Any]) -> SampleBatch:
        """The rows picked by a mask or index array (or a slice), as a batch of the same kind."""
        return SampleBatch(self.kind, self.index[rows], {k: v[rows] for k, v in self.columns.items()})

    def time_bounds(self) -> tuple[float, float] | None:
        """The lowest and highest event time, as ``float(times.min())``/``max()`` give them (NaN when a time
        is NaN); None when there are none or they are not numbers (an object column's min/max would pass a NaN
        by). Told once per batch and kept (admission and the timeline both ask): a batch's event-time column
        is never written after it is made — code that changes times makes a new batch (not a
        functools.cached_property: Python 3.11's takes a lock each time it is read)."""
        try:
            ends: tuple[float, float] | None = self.__dict__["_ends"]
        except KeyError:
            ends = self.__dict__["_ends"] = self._ends()
        return ends

    def told(self, ends: tuple[float, float]) -> SampleBatch:
        """This batch, its :meth:`time_bounds` already known (the native decoder reads them with its rows)."""
        self.__dict__["_ends"] = ends
        return self

    def _ends(self) -> tuple[float, float] | None:
        """:meth:`time_bounds`, told: a message's batch is mostly a few rows, read as Python numbers (numpy's
        per-call cost was most of telling them)."""
        times = self.columns[EVENT_TIME[self.kind]]
        if not len(times) or times.dtype.kind not in "fiu":
            return None
        if len(times) <= FEW_ROWS:
            listed = times.tolist()
            if any(map(math.isnan, listed)):  # (min and max of Python numbers would pass a NaN by)
                return math.nan, math.nan
            low, high = min(listed), max(listed)
            if low != 0.0 and high != 0.0:  # (a zero end: its sign is numpy's pick among 0.0 and -0.0)
                return float(low), float(high)
        return float(times.min()), float(times.max())

    def rows(self) -> list[dict[str, Any]]:
        """Row dicts (for low-volume kinds and tests; the hot path stays columnar)."""
        names = list(self.columns)
        cols = [self.columns[n].tolist() for n in names]
        return [dict(zip(names, vals, strict=True)) for vals in zip(*cols, strict=True)]


@dataclass
class Decoded:
    source: str = ""
    seq: int | None = None
    batches: list[SampleBatch] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    total: int = 0  # samples the message held (valid + rejected), 0 when the whole message was refused

    def count(self) -> int:
        return sum(len(b) for b in self.batches)


def parse_json(raw: bytes) -> tuple[Any, Reject | None]:
    """orjson first; the standard library only when that fails (it reads NaN, Infinity and huge integers,
    so that one non-finite value rejects one sample, not the whole message)."""
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        try:
            doc = json.loads(raw)
            # the standard library also reads lone surrogates ("\ud800"), which no UTF-8 text can carry
            json.dumps(doc, ensure_ascii=False).encode()
            return doc, None
        except (ValueError, RecursionError):  # UnicodeError is a ValueError
            return None, Reject("malformed_json", str(exc))


def decode_telemetry(raw: bytes) -> Decoded:
    out = Decoded()
    if len(raw) > MAX_MESSAGE_BYTES:
        out.rejects.append(Reject("oversized", f"{len(raw)} bytes > limit {MAX_MESSAGE_BYTES}"))
        return out
    fast = decode_native(raw) or _untold(decode_fast(raw))  # the native core when built, else msgspec
    if fast is not None:
        out.source, out.seq, parts, out.total = fast
        for kind, start, columns, ends in parts:
            n = len(next(iter(columns.values())))
            batch = SampleBatch(kind, np.arange(start, start + n, dtype=np.int64), columns)
            out.batches.append(batch if ends is None else batch.told(ends))
        return out
    doc, error = parse_json(raw)
    if error is None:
        error = _check_envelope(doc)
    if error is not None:
        out.rejects.append(error)
        return out
    out.source, out.seq = doc["source"], doc.get("seq")
    samples = doc.get("samples") or []
    _decode_rows(samples, out)
    offset = len(samples)
    for batch in doc.get("columns") or []:
        offset += _decode_columns(batch, offset, out)
    out.total = offset
    out.rejects.sort(key=lambda r: r.index or 0)
    return out


def _untold(fast: tuple[str, int | None, list[tuple[str, int, dict[str, Any]]], int] | None) -> NativeDecoded | None:
    """``decode_fast``'s answer as ``decode_native``'s, its batches' time bounds not told."""
    if fast is None:
        return None
    source, seq, parts, total = fast
    return source, seq, [(kind, start, columns, None) for kind, start, columns in parts], total


def _check_envelope(doc: Any) -> Reject | None:
    if type(doc) is not dict:
        return Reject("not_an_envelope", f"expected a JSON object, got {type(doc).__name__}")
    schema = doc.get("schema")
    if schema != TELEMETRY_SCHEMA:
        return Reject("unknown_schema", f"schema {schema!r} is not {TELEMETRY_SCHEMA!r}")
    source = doc.get("source")
    if type(source) is not str or not 0 < len(source) <= 256:
        return Reject("missing_field", "envelope field 'source' must be a non-empty string (≤ 256 chars)")
    seq = doc.get("seq")
    if seq is not None and (type(seq) is not int or not 0 <= seq <= MAX_SEQ):
        return Reject("wrong_type", f"envelope field 'seq' must be an integer in 0..{MAX_SEQ}")
    samples, columns = doc.get("samples"), doc.get("columns")
    if samples is None and columns is None:
        return Reject("missing_field", "envelope needs 'samples' (row-wise) or 'columns' (columnar)")
    if samples is not None and type(samples) is not list:
        return Reject("wrong_type", "envelope field 'samples' must be an array")
    if columns is not None and type(columns) is not list:
        return Reject("wrong_type", "envelope field 'columns' must be an array")
    if columns is not None and len(columns) > MAX_COLUMN_BATCHES:
        return Reject("oversized", f"{len(columns)} column batches > limit {MAX_COLUMN_BATCHES}")
    for c in columns or ():  # a batch that cannot say how many samples it holds cannot be accounted for
        if type(c) is not dict or type(c.get("n")) is not int or not 0 <= c["n"] <= MAX_SAMPLES:
            return Reject("bad_columns", f"every column batch needs an integer 'n' in 0..{MAX_SAMPLES}")
    n = len(samples or ()) + sum(c["n"] for c in columns or ())
    if n > MAX_SAMPLES:
        return Reject("oversized", f"{n} samples > limit {MAX_SAMPLES}")
    return None


def _decode_rows(samples: list[Any], out: Decoded) -> None:
    by_kind: dict[str, list[int]] = {}
    try:  # the common case, one kind per message, without a Python loop over the samples
        kinds = set(map(itemgetter("kind"), samples))
    except (KeyError, TypeError, IndexError):
        kinds = set()
    if len(kinds) == 1 and next(iter(kinds)) in SAMPLE_KINDS:
        by_kind[next(iter(kinds))] = list(range(len(samples)))
    else:
        for i, s in enumerate(samples):
            kind = s.get("kind") if type(s) is dict else None
            if type(kind) is str and kind in SAMPLE_KINDS:
                by_kind.setdefault(kind, []).append(i)
            elif type(s) is not dict:
                out.rejects.append(Reject("wrong_type", f"sample is a {type(s).__name__}, not an object", i))
            else:
                detail = f"sample kind {kind!r} is not one of {list(SAMPLE_KINDS)}"
                out.rejects.append(Reject("unknown_kind", detail, i))
    for kind in SAMPLE_KINDS:  # a fixed order keeps the output deterministic
        positions = by_kind.get(kind)
        if positions:
            rows = samples if len(positions) == len(samples) else [samples[i] for i in positions]
            rules = sample_rules(kind)
            columns = {
                rule.name: check_column(rule, values)
                for rule, values in zip(rules, _transpose(rows, rules), strict=True)
            }
            _collect(kind, np.array(positions, dtype=np.int64), columns, out)


def _transpose(rows: list[dict[str, Any]], rules: tuple[Any, ...]) -> list[list[Any]]:
    """Rows → one value list per rule, in C loops (itemgetter + zip) when every row has every field."""
    names = [rule.name for rule in rules]
    if len(names) > 1:
        try:
            return [list(col) for col in zip(*map(itemgetter(*names), rows), strict=True)]
        except KeyError:
            pass
    columns = []
    for name in names:
        try:
            columns.append(list(map(itemgetter(name), rows)))
        except KeyError:
            columns.append([row.get(name, MISSING) for row in rows])
    return columns


def _decode_columns(batch: dict[str, Any], offset: int, out: Decoded) -> int:
    """Check one column batch (its ``n`` was checked with the envelope); returns the positions it takes.
    Columns the contract does not know are ignored, whatever their length."""
    n: int = batch["n"]
    kind, data = batch.get("kind"), batch.get("data")
    whole = None
    if kind not in SAMPLE_KINDS:
        whole = Reject("unknown_kind", f"column batch kind {kind!r} is not one of {list(SAMPLE_KINDS)}")
    elif type(data) is not dict:
        whole = Reject("bad_columns", "a column batch needs an object 'data' of columns")
    else:
        known = {rule.name for rule in sample_rules(kind)}
        wrong = [k for k, v in data.items() if k in known and type(v) is list and len(v) != n]
        if wrong:
            whole = Reject("bad_columns", f"columns {wrong[:5]} do not have n={n} entries")
    if whole is not None:
        out.rejects.extend(Reject(whole.reason, whole.detail, offset + i) for i in range(n))
        return n
    assert isinstance(kind, str) and isinstance(data, dict)
    index = np.arange(offset, offset + n, dtype=np.int64)
    columns = {rule.name: _check_data(rule, data.get(rule.name, MISSING), n) for rule in sample_rules(kind)}
    _collect(kind, index, columns, out)
    return n


def _check_data(rule: Any, value: Any, n: int) -> Checked:
    if type(value) is list:
        return check_column(rule, value)
    one = check_column(rule, [value])  # a scalar (or an absent column) stands for every row
    return Checked(
        np.repeat(one.values, n),
        [(np.repeat(mask, n), reason, detail) for mask, reason, detail in one.problems],
    )


def _collect(kind: str, index: npt.NDArray[np.int64], columns: dict[str, Checked], out: Decoded) -> None:
    bad = np.zeros(len(index), dtype=bool)
    for checked in columns.values():
        for mask, reason, detail in checked.problems:
            new = mask & ~bad  # the first problem of a row is the one reported
            if new.any():
                out.rejects.extend(Reject(reason, f"{kind}.{detail}", int(i)) for i in index[new])
                bad |= new
    if bad.any():
        keep = ~bad
        out.batches.append(SampleBatch(kind, index[keep], {k: c.values[keep] for k, c in columns.items()}))
    elif len(index):
        out.batches.append(SampleBatch(kind, index, {k: c.values for k, c in columns.items()}))
