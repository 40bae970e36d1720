"""Sample rows of a Parquet file (Arrow columns, one table per sample kind) straight into the engine's column
batches, without the JSON envelope that ``analyze`` otherwise writes and decodes again.

It answers only when every column is certainly valid under the contract's field rules (the types Arrow
stores, no nulls, every value within its bounds, lengths and enumerations) and then gives the batches the
JSON path gives, bit for bit. For anything else it answers None, and the caller builds the JSON envelope so
that the telemetry decoder refuses what it refuses, with its reasons (``tests/unit/test_analyze_parquet.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streams.contract.columns import check_column
from streams.contract.envelope import MAX_SAMPLES, Decoded, SampleBatch
from streams.contract.schema import EVENT_TIME, FieldRule, sample_rules

LIMIT = 2**62  # integers beyond it are out of range for the telemetry decoder


def read_batches(path: Path, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
    """The file's rows, its string columns read as dictionaries: each distinct string of a column chunk is
    decoded once (Parquet stores them so), and :func:`kinds_of` and :func:`_strings` read the codes."""
    schema = pq.ParquetFile(path).schema_arrow
    strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    batches: Iterator[pa.RecordBatch] = pq.ParquetFile(path, read_dictionary=strings).iter_batches(batch_size=rows)
    return batches


def kinds_of(column: pa.ChunkedArray) -> tuple[list[Any], npt.NDArray[np.intp]]:
    """The distinct values of a (string or dictionary) column in the order they first appear, None for a
    null, and each row's position among them."""
    if pa.types.is_dictionary(column.type):
        encoded = _unified(column)
        values = [*encoded.dictionary.to_pylist(), None]
        codes = encoded.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
    else:
        encoded = column.combine_chunks().dictionary_encode(null_encoding="encode")
        values, codes = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
    if not len(codes):
        return [], np.zeros(0, np.intp)
    present, first = np.unique(codes, return_index=True)
    present = present[np.argsort(first, kind="stable")]
    position = np.zeros(len(values), np.intp)
    position[present] = np.arange(len(present))
    return [values[i] for i in present.tolist()], position[codes]


def rows_at(table: pa.Table, rows: npt.NDArray[np.intp], runs: int = 64) -> pa.Table:
    """The rows of ``table`` at ``rows`` (increasing): as slices without a copy when they make up at most
    ``runs`` contiguous runs (a file written batch by batch, each of one kind), else gathered."""
    if not len(rows):
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) >= runs:
        return table.take(rows)
    starts = np.concatenate(([0], breaks)).tolist()
    ends = np.concatenate((breaks, [len(rows)])).tolist()
    firsts = rows[starts].tolist()
    return pa.concat_tables([table.slice(f, e - s) for f, s, e in zip(firsts, starts, ends, strict=True)])


def _unified(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """A dictionary column as one array over one dictionary (its chunks may each have their own)."""
    if column.num_chunks == 1:
        return column.chunk(0)
    combined: pa.DictionaryArray = column.unify_dictionaries().combine_chunks()
    return combined


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
    if kind == "string" and _is_text(t):
        return _strings(rule, array)
    return None


def _is_text(t: pa.DataType) -> bool:
    """Strings, also dictionary-encoded (as :func:`read_batches` reads them, or as a file stores them)."""
    if pa.types.is_dictionary(t):
        return _is_text(t.value_type) and bool(pa.types.is_integer(t.index_type))
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


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
    """Each distinct string checked once and made a Python string once (a dictionary's entries no row uses
    are not checked: they are no sample's). A file's dictionary serves all the messages cut from its batch:
    its strings and their checks are made once (:class:`_Dictionaries`)."""
    given = pa.types.is_dictionary(array.type)
    encoded = _unified(array) if given else pc.dictionary_encode(array.combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    texts, valid = _DICTIONARIES.of(rule, encoded.dictionary) if given else _entries(rule, encoded.dictionary)
    if len(codes) and not valid[codes].all():
        return None
    values: npt.NDArray[Any] = texts[codes]
    return values


def _entries(rule: FieldRule, dictionary: pa.Array) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    """A dictionary's strings as an object array, and which of them ``rule`` admits."""
    distinct = dictionary.to_pylist()
    if rule.enum is not None:
        valid = [s in rule.enum for s in distinct]
    else:
        lo = rule.min_length or 0
        hi = rule.max_length if rule.max_length is not None else np.inf
        valid = [lo <= len(s) <= hi for s in distinct]
    texts = np.empty(len(distinct), dtype=object)
    texts[:] = distinct
    return texts, np.array(valid, dtype=np.bool_)


class _Dictionaries:
    """:func:`_entries` of the last few dictionaries seen, per rule. A dictionary is known by its buffers'
    addresses, offset and length; each entry holds the dictionary itself, so that no other array can take
    those addresses while it is remembered."""

    KEEP = 64

    def __init__(self) -> None:
        self._known: OrderedDict[tuple[Any, ...], tuple[pa.Array, npt.NDArray[Any], npt.NDArray[np.bool_]]]
        self._known = OrderedDict()

    def of(self, rule: FieldRule, dictionary: pa.Array) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        where = tuple(0 if b is None else b.address for b in dictionary.buffers())
        key = (rule, dictionary.type, where, dictionary.offset, len(dictionary))
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = (dictionary, *_entries(rule, dictionary))
            if len(self._known) > self.KEEP:
                self._known.popitem(last=False)
        return known[1], known[2]


_DICTIONARIES = _Dictionaries()
