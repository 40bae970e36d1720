"""The native fast path (``native/src/decode.rs``): one telemetry message's bytes in, typed columns out,
made with the same field rules as the Python decoder (compiled from the schema files here and handed over).

It answers only for messages whose every sample is valid under those rules, and then with the columns the
Python decoder gives, bit for bit; for anything else it answers None and :mod:`streams.contract.envelope`
decides, naming the reasons (``tests/unit/test_native_decode.py`` checks both on the fuzz corpora). Without
the native core (or with ``DRIFTLOG_NATIVE=0``), :func:`decode_native` always answers None.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native
from streams.contract.fast import MAX_COLUMN_BATCHES, MAX_COLUMN_ROWS, MAX_SEQ
from streams.contract.schema import EVENT_TIME, SAMPLE_KINDS, TELEMETRY_SCHEMA, FieldRule, sample_rules

available = hasattr(native.core, "strings_at")  # (an extension built before it: the Python decoder decides)
_DTYPES = (np.float64, np.int64, np.bool_, np.uint32)  # the native core's type codes
_CODES = {"number": 0, "integer": 1, "boolean": 2, "string": 3}  # a field's type -> its code
_STRING = _CODES["string"]
_NONE = np.empty((0, 0))
Parts = list[tuple[str, int, dict[str, npt.NDArray[Any]], tuple[float, float] | None]]
Decoded = tuple[str, int | None, Parts, int]  # (source, seq, parts, total samples)


def _bounds(rule: FieldRule) -> tuple[Any, Any, Any]:
    bounds = (rule.minimum, rule.maximum, rule.exclusive_minimum)
    if rule.kind == "integer":
        if any(b is not None and b != int(b) for b in bounds):
            raise ValueError(f"{rule.name}: an integer field with a fractional bound")
        return tuple(None if b is None else int(b) for b in bounds)  # type: ignore[return-value]
    return tuple(None if b is None else float(b) for b in bounds)  # type: ignore[return-value]


def _spec(rule: FieldRule) -> tuple[Any, ...]:
    return (
        rule.name,
        rule.kind,
        None if rule.required else rule.default,
        _bounds(rule),
        (rule.min_length or 0, rule.max_length),
        None if rule.enum is None else sorted(rule.enum),
    )


@cache
def _decoder() -> Any:
    kinds = [(kind, [_spec(rule) for rule in sample_rules(kind)]) for kind in SAMPLE_KINDS]
    assert native.core is not None
    return native.core.TelemetryDecoder(
        TELEMETRY_SCHEMA, MAX_COLUMN_ROWS, MAX_COLUMN_BATCHES, MAX_SEQ, kinds, EVENT_TIME
    )


@cache
def _layout(kind: str) -> tuple[tuple[tuple[str, int, int], ...], tuple[tuple[int, np.dtype[Any], int], ...]]:
    """Per field of ``kind``, in rule order: (name, type code, row in its type's 2-D array); and per type its
    fields use, (its code, its dtype, how many of its fields) (the others' arrays are empty: not made)."""
    seen = [0] * len(_DTYPES)
    out = []
    for rule in sample_rules(kind):
        code = _CODES[rule.kind]
        out.append((rule.name, code, seen[code]))
        seen[code] += 1
    return tuple(out), tuple((code, np.dtype(_DTYPES[code]), count) for code, count in enumerate(seen) if count)


def decode_native(raw: bytes) -> Decoded | None:
    """(source, seq, [(kind, first sample position, columns, event-time ends)], total samples) as
    ``decode_fast`` gives it (the ends: as :meth:`SampleBatch.time_bounds` tells them, or None: not told
    here), or None: the Python decoder decides (also when there is no native core). Each column is a row of
    one 2-D array per type, made on its buffer in one call (strings: one gather of the part's codes), not an
    array made per column; only the types a kind has are read (a message is a few rows: numpy's per-call cost
    is most of its decoding)."""
    if not available:
        return None
    got = _decoder().decode(raw)
    if got is None:
        return None
    source, seq, total, strings, parts = got
    out: Parts = []
    tables: list[npt.NDArray[Any]] = [_NONE] * len(_DTYPES)  # (placeholders for the types a kind lacks)
    for kind, start, n, buffers, ends in parts:
        layout, used = _layout(kind)
        for code, dtype, count in used:
            tables[code] = np.ndarray((count, n), dtype, buffers[code])
        if used[-1][0] == _STRING:  # (codes in increasing order: strings' last) the codes' strings
            texts = np.empty(used[-1][2] * n, object)
            native.core.strings_at(strings, tables[_STRING], texts)  # type: ignore[union-attr]
            tables[_STRING] = texts.reshape(-1, n)
        out.append((kind, start, {name: tables[code][row] for name, code, row in layout}, ends))
    return source, seq, out, total
