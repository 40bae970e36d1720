"""Sample rows of a Parquet file (Arrow columns, one table per sample kind) straight into the engine's column
batches, without the JSON envelope that ``analyze`` otherwise writes and decodes again.

It answers only when every column is certainly valid under the contract's field rules (the types Arrow
stores, no nulls, every value within its bounds, lengths and enumerations) and then gives the batches the
JSON path gives, bit for bit. For anything else it answers None, and the caller builds the JSON envelope so
that the telemetry decoder refuses what it refuses, with its reasons (``tests/unit/test_analyze_parquet.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streams.contract.columns import check_column
from streams.contract.envelope import MAX_SAMPLES, Decoded, SampleBatch
from streams.contract.schema import EVENT_TIME, SAMPLE_KINDS, FieldRule, sample_rules

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


class Columns:
    """A table of sample rows (some messages' worth of a file) as the engine's columns: each kind's rows
    converted and checked once, by column, for :meth:`decoded` to cut the messages from (views, no copy)."""

    def __init__(self, rows: pa.Table) -> None:
        present, codes = kinds_of(rows.column("kind"))
        bad = np.zeros(rows.num_rows, dtype=np.bool_)
        self._kinds: list[tuple[str, npt.NDArray[np.intp], dict[str, npt.NDArray[Any]]]] = []
        for i, kind in enumerate(present):
            at = np.flatnonzero(codes == i)
            converted = _converted(kind, rows, at, bad) if kind in SAMPLE_KINDS else None
            if converted is None:  # an unknown kind, or a column no row of this kind can pass
                bad[at] = True
            else:
                self._kinds.append((kind, at, converted))
        self._kinds.sort(key=lambda k: SAMPLE_KINDS.index(k[0]))  # the envelope's order
        self._bad = np.concatenate(([0], np.cumsum(bad)))

    def decoded(self, start: int, stop: int, source: str, seq: int) -> tuple[Decoded, float] | None:
        """The decoded message of rows ``start:stop`` and its oldest event time, or None when the JSON path
        must decide (a row that breaks a rule, or of no sample kind)."""
        if self._bad[stop] != self._bad[start] or stop - start > MAX_SAMPLES:
            return None
        out = Decoded(source=source, seq=seq)
        oldest = np.inf
        for kind, at, columns in self._kinds:
            low, high = np.searchsorted(at, (start, stop)).tolist()
            if low == high:
                continue
            batch = {name: values[low:high] for name, values in columns.items()}
            out.batches.append(SampleBatch(kind, np.arange(out.total, out.total + high - low, dtype=np.int64), batch))
            out.total += high - low
            oldest = min(oldest, float(batch[EVENT_TIME[kind]].min()))
        return out, oldest


def _converted(
    kind: str, rows: pa.Table, at: npt.NDArray[np.intp], bad: npt.NDArray[np.bool_]
) -> dict[str, npt.NDArray[Any]] | None:
    """The columns of ``kind``'s rows (``rows`` at ``at``), marking those that break a rule in ``bad``; None
    when a column's type (or its absence) fails every row."""
    table = rows_at(rows.select([n for n in rows.column_names if n in _fields(kind)]), at)
    columns = {}
    for rule in sample_rules(kind):
        name = rule.name
        checked = _column(rule, table.column(name) if name in table.column_names else None, table.num_rows)
        if checked is None:
            return None
        columns[name], wrong = checked
        if wrong is not None:
            bad[at[wrong]] = True
    return columns


@cache
def _fields(kind: str) -> frozenset[str]:
    return frozenset(rule.name for rule in sample_rules(kind))


def _column(
    rule: FieldRule, array: pa.ChunkedArray | None, n: int
) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_] | None] | None:
    """A column's values as the JSON path decodes them and which rows break the rule (None: none), or None
    when its type is not one the rule admits."""
    if array is None:  # the field's default for every row, as for a column the envelope leaves out
        if rule.required:
            return None
        default = check_column(rule, [rule.default])
        return np.repeat(default.values, n), None
    kind, t = rule.kind, array.type
    nulls = array.is_null().to_numpy() if array.null_count else None
    if kind == "number" and (pa.types.is_floating(t) or _small_integer(t)) and not pa.types.is_float16(t):
        values = _filled(array, 0).astype(np.float64, copy=False)
        return values, _or(nulls, _outside(rule, values, ~np.isfinite(values)))
    if kind == "integer" and _small_integer(t):
        values = _filled(array, 0).astype(np.int64, copy=False)
        return values, _or(nulls, _outside(rule, values, (values < -LIMIT) | (values > LIMIT)))
    if kind == "boolean" and pa.types.is_boolean(t):
        return np.asarray(_filled(array, False), dtype=bool), nulls
    if kind == "string" and _is_text(t):
        return _strings(rule, array)
    return None


def _filled(array: pa.ChunkedArray, value: Any) -> npt.NDArray[Any]:
    """The values as numpy, nulls as ``value`` (the rows are marked bad apart)."""
    values: npt.NDArray[Any] = (array.fill_null(value) if array.null_count else array).to_numpy()
    return values


def _or(a: npt.NDArray[np.bool_] | None, b: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_] | None:
    both = b if a is None else a | b
    return both if both.any() else None


def _outside(rule: FieldRule, values: npt.NDArray[Any], bad: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """``bad`` and the values beyond the rule's bounds."""
    if rule.minimum is not None:
        bad |= values < rule.minimum
    if rule.exclusive_minimum is not None:
        bad |= values <= rule.exclusive_minimum
    if rule.maximum is not None:
        bad |= values > rule.maximum
    return bad


def _is_text(t: pa.DataType) -> bool:
    """Strings, also dictionary-encoded (as :func:`read_batches` reads them, or as a file stores them)."""
    if pa.types.is_dictionary(t):
        return _is_text(t.value_type) and bool(pa.types.is_integer(t.index_type))
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _small_integer(t: pa.DataType) -> bool:
    """Integer types whose every value numpy holds as int64 exactly (not uint64)."""
    return pa.types.is_integer(t) and not pa.types.is_uint64(t)


def _strings(rule: FieldRule, array: pa.ChunkedArray) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_] | None]:
    """Each distinct string a row uses made a Python string once and checked once; a null is the entry past
    the dictionary's last, which no rule admits."""
    encoded = _unified(array) if pa.types.is_dictionary(array.type) else pc.dictionary_encode(array.combine_chunks())
    n = len(encoded.dictionary)
    indices = encoded.indices.fill_null(n) if encoded.indices.null_count else encoded.indices
    codes = indices.to_numpy()
    texts, valid = _entries(rule, encoded.dictionary, codes)
    return texts[codes], _or(None, ~valid[codes])


def _entries(
    rule: FieldRule, dictionary: pa.Array, codes: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    """The strings of a dictionary's entries that ``codes`` uses, as an object array one longer than the
    dictionary (the last: a null's), and which of them ``rule`` admits. Entries no row uses are no sample's:
    not made strings, not checked."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(dictionary) + 1)[:-1])
    distinct = dictionary.take(used).to_pylist()
    if rule.enum is not None:
        admitted = [s in rule.enum for s in distinct]
    else:
        lo = rule.min_length or 0
        hi = rule.max_length if rule.max_length is not None else np.inf
        admitted = [lo <= len(s) <= hi for s in distinct]
    strings = np.empty(len(distinct), dtype=object)
    strings[:] = distinct
    texts = np.empty(len(dictionary) + 1, dtype=object)
    texts[used] = strings
    valid = np.zeros(len(dictionary) + 1, dtype=np.bool_)
    valid[used] = admitted
    return texts, valid
