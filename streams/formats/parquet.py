"""Sample rows of a Parquet file (Arrow columns, one table per sample kind) straight into the engine's column
batches, without the JSON envelope that ``analyze`` otherwise writes and decodes again.

It answers only when every column is certainly valid under the contract's field rules (the types Arrow
stores, no nulls, every value within its bounds, lengths and enumerations) and then gives the batches the
JSON path gives, bit for bit. For anything else it answers None, and the caller builds the JSON envelope so
that the telemetry decoder refuses what it refuses, with its reasons (``tests/unit/test_analyze_parquet.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from streams.contract.columns import check_column
from streams.contract.envelope import MAX_SAMPLES, Decoded, SampleBatch
from streams.contract.schema import EVENT_TIME, FieldRule, sample_rules

LIMIT = 2**62  # integers beyond it are out of range for the telemetry decoder


def decode_tables(parts: list[tuple[str, pa.Table]], source: str, seq: int) -> tuple[Decoded, float] | None:
    """The decoded message of ``parts`` ((kind, its rows), in envelope order) and its oldest event time, or
    None when the JSON path must decide."""
    out = Decoded(source=source, seq=seq)
    oldest = np.inf
    for kind, table in parts:
        n = table.num_rows
        columns = {}
        for rule in sample_rules(kind):
            name = rule.name
            values = _column(rule, table.column(name) if name in table.column_names else None, n)
            if values is None:
                return None
            columns[name] = values
        out.batches.append(SampleBatch(kind, np.arange(out.total, out.total + n, dtype=np.int64), columns))
        out.total += n
        oldest = min(oldest, float(columns[EVENT_TIME[kind]].min()))
    if out.total > MAX_SAMPLES:
        return None
    return out, oldest


def _column(rule: FieldRule, array: pa.ChunkedArray | None, n: int) -> npt.NDArray[Any] | None:
    if array is None:  # the field's default for every row, as for a column the envelope leaves out
        if rule.required:
            return None
        default = check_column(rule, [rule.default])
        return np.repeat(default.values, n)
    if array.null_count:
        return None
    kind, t = rule.kind, array.type
    if kind == "number" and (pa.types.is_floating(t) or _small_integer(t)) and not pa.types.is_float16(t):
        return _bounded(rule, array.to_numpy().astype(np.float64, copy=False))
    if kind == "integer" and _small_integer(t):
        values = array.to_numpy().astype(np.int64, copy=False)
        in_range = not len(values) or (values.min() >= -LIMIT and values.max() <= LIMIT)
        return values if in_range and _within(rule, values) else None
    if kind == "boolean" and pa.types.is_boolean(t):
        return np.asarray(array.to_numpy(), dtype=bool)
    if kind == "string" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return _strings(rule, array)
    return None


def _small_integer(t: pa.DataType) -> bool:
    """Integer types whose every value numpy holds as int64 exactly (not uint64)."""
    return pa.types.is_integer(t) and not pa.types.is_uint64(t)


def _bounded(rule: FieldRule, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64] | None:
    return values if np.isfinite(values).all() and _within(rule, values) else None


def _within(rule: FieldRule, values: npt.NDArray[Any]) -> bool:
    if not len(values):
        return True
    low, high = values.min(), values.max()
    return not (
        (rule.minimum is not None and low < rule.minimum)
        or (rule.exclusive_minimum is not None and low <= rule.exclusive_minimum)
        or (rule.maximum is not None and high > rule.maximum)
    )


def _strings(rule: FieldRule, array: pa.ChunkedArray) -> npt.NDArray[Any] | None:
    """Each distinct string checked once and made a Python string once."""
    encoded = pc.dictionary_encode(array.combine_chunks())
    distinct = encoded.dictionary.to_pylist()
    if rule.enum is not None:
        if not set(distinct) <= rule.enum:
            return None
    else:
        lo = rule.min_length or 0
        hi = rule.max_length if rule.max_length is not None else np.inf
        if any(not lo <= len(s) <= hi for s in distinct):
            return None
    texts = np.empty(len(distinct), dtype=object)
    texts[:] = distinct
    values: npt.NDArray[Any] = texts[encoded.indices.to_numpy()]
    return values
