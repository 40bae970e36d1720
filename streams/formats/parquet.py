"""Sample rows of a Parquet file (Arrow columns, read into numpy and checked some messages at a time, by kind)
straight into the engine's column batches, without the JSON envelope that ``analyze`` otherwise writes and
decodes again.

It answers for a message only when every column of its rows is certainly valid under the contract's field
rules (the types Arrow stores, no nulls, every value within its bounds, lengths and enumerations) and then
gives the batches the JSON path gives, bit for bit. For anything else it answers None, and the caller builds
the JSON envelope so that the telemetry decoder refuses what it refuses, with its reasons
(``tests/unit/test_analyze_parquet.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from functools import cached_property, reduce
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
FINITE = float(np.finfo(np.float64).max)  # (a NaN or an infinity is beyond it)


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
        values, codes = [*encoded.dictionary.to_pylist(), None], _codes(encoded)
    else:
        encoded = column.combine_chunks().dictionary_encode(null_encoding="encode")
        values, codes = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
    if not len(codes):
        return [], np.zeros(0, np.intp)
    first = np.full(len(values), len(codes))  # each value's first row (a linear pass, not np.unique's sort)
    np.minimum.at(first, codes, np.arange(len(codes)))
    present = np.flatnonzero(first < len(codes))
    present = present[np.argsort(first[present], kind="stable")]
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
    """A table of sample rows (some messages' worth of a file) as the engine's columns: each column read
    into numpy once, each kind's rows of it picked and checked once, for :meth:`decoded` to cut the messages
    from (views, no copy)."""

    def __init__(self, rows: pa.Table) -> None:
        present, codes = kinds_of(rows.column("kind"))
        bad = np.zeros(rows.num_rows, dtype=np.bool_)
        whole = {name: _Whole(rows.column(name)) for name in rows.column_names}
        self._kinds: list[tuple[str, npt.NDArray[np.intp], dict[str, npt.NDArray[Any]]]] = []
        for kind in [k for k in SAMPLE_KINDS if k in present]:  # the envelope's order
            mask = codes == present.index(kind)
            at = np.flatnonzero(mask)
            converted = _converted(kind, whole, mask, at, bad)
            if converted is None:  # a column no row of this kind can pass
                bad[at] = True
            else:
                self._kinds.append((kind, at, converted))
        for i, kind in enumerate(present):
            if kind not in SAMPLE_KINDS:  # (None: a null kind)
                bad[codes == i] = True
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


class _Whole:
    """A column of the table as numpy, made once whichever kinds' rows read it: its values (a null's is a
    placeholder: the null rows are marked apart), or for strings, codes into a dictionary whose entries are
    made Python strings and checked once (those of a dictionary larger than the rows: only the ones they
    use; an entry no row uses is no sample's)."""

    def __init__(self, array: pa.ChunkedArray) -> None:
        self.array = array
        self.type = array.type
        self.nulls = ~_buffer(array, 0) if array.null_count else None

    @cached_property
    def values(self) -> npt.NDArray[Any]:
        """The values of a boolean or numeric column (a null's slot: whatever the file left there)."""
        return _buffer(self.array, 1)

    @cached_property
    def codes(self) -> npt.NDArray[Any]:
        """Each row's entry; a null's is the one past the last."""
        return self._encoded[0]

    @cached_property
    def _encoded(self) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp], list[str], int]:
        """(codes, the entries made strings, their strings, how many entries)"""
        array = self.array
        encoded = _unified(array) if pa.types.is_dictionary(self.type) else pc.dictionary_encode(array.combine_chunks())
        n, codes = len(encoded.dictionary), _codes(encoded)
        # the whole dictionary, unless it is larger than the rows: then only the entries they use
        used = np.arange(n) if n <= len(codes) else np.flatnonzero(np.bincount(codes, minlength=n + 1)[:-1])
        dictionary = encoded.dictionary if len(used) == n else encoded.dictionary.take(used)
        return codes, used, dictionary.to_pylist(), n

    @cached_property
    def texts(self) -> npt.NDArray[Any]:
        """The strings by entry (None for one not made, and past the last)."""
        _, used, distinct, n = self._encoded
        strings = np.empty(len(distinct), dtype=object)
        strings[:] = distinct
        texts = np.empty(n + 1, dtype=object)
        texts[used] = strings
        return texts

    def admitted(self, rule: FieldRule) -> npt.NDArray[np.bool_] | None:
        """By entry, whether ``rule`` admits it (False for one not made, and past the last); None when it
        admits every entry (then only a null breaks it)."""
        _, used, distinct, n = self._encoded
        if rule.enum is not None:
            admitted = [s in rule.enum for s in distinct]
        else:
            lo = rule.min_length or 0
            hi = rule.max_length if rule.max_length is not None else np.inf
            admitted = [lo <= len(s) <= hi for s in distinct]
        if len(used) == n and all(admitted):
            return None
        valid = np.zeros(n + 1, dtype=np.bool_)
        valid[used] = admitted
        return valid


def _converted(
    kind: str,
    whole: dict[str, _Whole],
    rows: npt.NDArray[np.bool_],
    at: npt.NDArray[np.intp],
    bad: npt.NDArray[np.bool_],
) -> dict[str, npt.NDArray[Any]] | None:
    """The columns of ``kind``'s rows (``rows``, a mask; ``at``, their positions), marking those that break
    a rule in ``bad``; None when a column's type (or its absence) fails every row."""
    columns = {}
    for rule in sample_rules(kind):
        column = whole.get(rule.name)
        checked = _column(rule, column, at)
        if checked is None:
            return None
        columns[rule.name], wrong = checked
        if wrong is not None:
            bad[at[wrong]] = True
        if column is not None and column.nulls is not None:
            bad |= column.nulls & rows  # (marked on the whole table: cheaper than picking the kind's rows)
    return columns


def _column(
    rule: FieldRule, whole: _Whole | None, at: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_] | None] | None:
    """A column's values at rows ``at`` as the JSON path decodes them and which of those break the rule
    (None: none; a null's value is a placeholder, the caller marks it), or None when its type is not one
    the rule admits."""
    if whole is None:  # the field's default for every row, as for a column the envelope leaves out
        if rule.required:
            return None
        default = check_column(rule, [rule.default])
        return np.repeat(default.values, len(at)), None
    kind, t = rule.kind, whole.type
    if kind == "number" and (pa.types.is_floating(t) or _small_integer(t)) and not pa.types.is_float16(t):
        values = whole.values[at].astype(np.float64, copy=False)
        return values, _outside(rule, values, FINITE)
    if kind == "integer" and _small_integer(t):
        values = whole.values[at].astype(np.int64, copy=False)
        return values, _outside(rule, values, LIMIT)
    if kind == "boolean" and pa.types.is_boolean(t):
        return np.asarray(whole.values[at], dtype=bool), None
    if kind == "string" and _is_text(t):
        valid = whole.admitted(rule)
        if valid is None and len(whole.texts) == 2:  # one string (e.g. the job's): filled, faster than gathered
            values = np.empty(len(at), dtype=object)
            values.fill(whole.texts[0])
            return values, None
        codes = whole.codes[at]
        return whole.texts[codes], None if valid is None else _any(~valid[codes])
    return None


def _codes(encoded: pa.DictionaryArray) -> npt.NDArray[np.intp]:
    """Each row's entry in the dictionary; a null's: the one past the last."""
    codes = _buffer(encoded.indices, 1).astype(np.intp)  # (a copy: Arrow's buffer is never written)
    if encoded.null_count:
        np.copyto(codes, len(encoded.dictionary), where=~_buffer(encoded, 0))
    return codes


def _buffer(array: pa.ChunkedArray | pa.Array, i: int) -> npt.NDArray[Any]:
    """Buffer ``i`` of each chunk as numpy, joined (no copy for one chunk): the validity bitmap (0) or the
    values (1: bits for booleans, else numbers of the type's width; a null's
    slot holds whatever the file left there). Faster than Arrow's ``to_numpy``, which fills the nulls
    (here marked apart) and unpacks bits row by row."""
    t = array.type
    bits = i == 0 or pa.types.is_boolean(t)
    number = "f" if pa.types.is_floating(t) else "u" if pa.types.is_unsigned_integer(t) else "i"
    dtype = np.bool_ if bits else np.dtype(f"{number}{t.byte_width}")
    parts = []
    for chunk in array.chunks if isinstance(array, pa.ChunkedArray) else [array]:
        buffer, end = chunk.buffers()[i], chunk.offset + len(chunk)
        if not len(chunk):
            continue
        if not bits:
            parts.append(np.frombuffer(buffer, dtype, count=end)[chunk.offset :])
        elif buffer is None:  # no bitmap: no nulls, or all (a column of Arrow's null type)
            parts.append(np.full(len(chunk), chunk.null_count == 0))
        else:
            unpacked = np.unpackbits(np.frombuffer(buffer, np.uint8), count=end, bitorder="little")
            parts.append(unpacked[chunk.offset :].view(np.bool_))
    return parts[0] if len(parts) == 1 else np.concatenate([np.zeros(0, dtype), *parts])


def _any(rows: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_] | None:
    return rows if rows.any() else None


def _outside(rule: FieldRule, values: npt.NDArray[Any], limit: float) -> npt.NDArray[np.bool_] | None:
    """The rows whose value is beyond ``limit`` either way (or NaN) or the rule's bounds, None when none
    is: first by the least and greatest value (the usual answer, without a mask)."""
    if not len(values):
        return None
    low, high = values.min(), values.max()
    if -limit <= low and high <= limit and not _breaks(rule, low, high):
        return None
    bad: npt.NDArray[np.bool_] = ~((values >= -limit) & (values <= limit)) | _breaks(rule, values, values)
    return bad


def _breaks(rule: FieldRule, low: Any, high: Any) -> Any:
    """Whether values whose least is ``low`` and greatest ``high`` break any of the rule's bounds (numbers or
    arrays, as :meth:`FieldRule.broken_bounds`)."""
    return reduce(operator.or_, (broken for broken, _ in rule.broken_bounds(low, high)), False)


def _is_text(t: pa.DataType) -> bool:
    """Strings, also dictionary-encoded (as :func:`read_batches` reads them, or as a file stores them)."""
    if pa.types.is_dictionary(t):
        return _is_text(t.value_type) and bool(pa.types.is_integer(t.index_type))
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _small_integer(t: pa.DataType) -> bool:
    """Integer types whose every value numpy holds as int64 exactly (not uint64)."""
    return pa.types.is_integer(t) and not pa.types.is_uint64(t)
