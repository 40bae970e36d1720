"""The engine over files, without Kafka (``driftlog analyze``): the same processor the live worker runs.

Each file is an input channel; PyTorch profiler traces (one per rank) are one together, read step by step
across ranks (:mod:`streams.formats.kineto`). A line (JSONL) or row (Parquet) is either a whole Kafka value
— a telemetry envelope or a decision, as ``driftlog simulate --out`` writes them — or one sample or
decision row (its ``kind`` column), which are batched into envelopes per file. Files are read side by side,
always from the one whose next message is oldest in event time, so the watermark advances and memory stays
bounded however the files are listed (a file split in two keeps its sources in order). Provenance of a
record: topic = the file's path, offset = its line (or row) number.
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.records import AuditRecord, SourcePosition
from audit.store import AuditStore, RawRecord
from streams.contract.envelope import Decoded
from streams.contract.schema import DECISION_SCHEMA, EVENT_TIME, SAMPLE_KINDS, TELEMETRY_SCHEMA
from streams.errors import ConfigError
from streams.formats.kineto import is_trace_file, read_trace_files
from streams.formats.parquet import Columns, kinds_of, read_batches, rows_at
from streams.pipeline import Output, Processor, channel
from streams.produce import Report, must_exist, rows_of

ROWS_PER_MESSAGE = 5000
CHUNK_MESSAGES = 20  # a Parquet file's rows are converted and checked this many messages at a time
READ_AHEAD = 1  # a Parquet file's chunks read and converted on a thread ahead of the one the engine is given
READ_AHEAD_THREAD = "driftlog-read-ahead"
Progress = Callable[[int, int], None]  # (bytes read, bytes in all)
T = TypeVar("T")


@dataclass(frozen=True)
class Message:
    kind: str  # telemetry | decisions
    value: bytes | Callable[[], bytes]  # a callable: made only if a dead letter needs it (decoded is given)
    source: SourcePosition
    time: float  # its oldest event time: files are merged by it
    decoded: Decoded | None = None  # already decoded (Parquet columns): the value is not decoded again


def messages_of(path: Path, report: Report) -> Generator[Message, None, None]:
    """A file's Kafka values, in file order."""
    if path.suffix.lower() == ".parquet" and samples_only(path):
        yield from parquet_columns(path)
        return
    rows: list[dict[str, Any]] = []
    seq = 0
    position = 0

    def batch() -> Message:
        nonlocal seq, rows
        doc = {"schema": TELEMETRY_SCHEMA, "source": f"file:{path.name}", "seq": seq, "samples": rows}
        seq, rows = seq + 1, []
        return Message("telemetry", orjson.dumps(doc), SourcePosition(str(path), 0, position), oldest(doc))

    for position, row in enumerate(rows_of(path, report), 1):
        schema = row.get("schema")
        if schema == TELEMETRY_SCHEMA:
            yield Message("telemetry", orjson.dumps(row), SourcePosition(str(path), 0, position), oldest(row))
        elif schema == DECISION_SCHEMA or row.get("kind") == "decision":
            row.pop("kind", None)
            row["schema"] = DECISION_SCHEMA
            yield Message("decisions", orjson.dumps(row), SourcePosition(str(path), 0, position), _time(row))
        elif row.get("kind") in SAMPLE_KINDS:
            rows.append(row)
            if len(rows) >= ROWS_PER_MESSAGE:
                yield batch()
        else:
            report.skip(f"{path}:{position}: neither an envelope, a decision nor a sample (kind {row.get('kind')!r})")
    if rows:
        yield batch()


def samples_only(path: Path) -> bool:
    """Whether a Parquet file holds sample rows only (a ``kind`` column of sample kinds, no envelopes): then
    it is read by columns (:func:`parquet_columns`), never row by row."""
    names = pq.ParquetFile(path).schema_arrow.names
    if "kind" not in names or "schema" in names:
        return False
    kinds = pq.ParquetFile(path, read_dictionary=["kind"]).read(columns=["kind"])["kind"]  # (unique by codes)
    return set(pc.unique(kinds).to_pylist()) <= set(SAMPLE_KINDS)


def parquet_columns(path: Path) -> Iterator[Message]:
    """A Parquet file of sample rows as columnar messages of ``ROWS_PER_MESSAGE`` rows (per kind), cut where
    the row-wise reading cuts its messages, so the provenance (the row number ending each message) is the
    same. Valid columns go to the engine as they are (:mod:`streams.formats.parquet`), converted and checked
    ``CHUNK_MESSAGES`` messages at a time, on a thread ahead of the engine (:func:`_ahead`); the envelope's
    JSON is made only for a message the decoder must judge, or for a dead letter's original bytes."""
    source = f"file:{path.name}"
    position = seq = 0
    size = CHUNK_MESSAGES * ROWS_PER_MESSAGE
    chunks = ((chunk, Columns(chunk)) for chunk in _slices(read_batches(path, size), size))
    for chunk, columns in _ahead(chunks, READ_AHEAD):
        for start in range(0, chunk.num_rows, ROWS_PER_MESSAGE):
            stop = min(start + ROWS_PER_MESSAGE, chunk.num_rows)
            position += stop - start
            where = SourcePosition(str(path), 0, position)
            decoded = columns.decoded(start, stop, source, seq)
            if decoded is not None:
                value = partial(_encoded, chunk, start, stop, source, seq)
                yield Message("telemetry", value, where, decoded[1], decoded[0])
            else:
                doc = _envelope(chunk.slice(start, stop - start), source, seq)
                yield Message("telemetry", orjson.dumps(doc), where, oldest(doc))
            seq += 1


def _envelope(rows: pa.Table, source: str, seq: int) -> dict[str, Any]:
    """The columnar envelope of ``rows``: a batch per kind, each column's values as one list (no dict per row)."""
    columns = []
    for kind, part in _by_kind(rows):
        data = {name: part.column(name).to_pylist() for name in part.column_names if name != "kind"}
        columns.append({"kind": kind, "n": part.num_rows, "data": data})
    return {"schema": TELEMETRY_SCHEMA, "source": source, "seq": seq, "columns": columns}


def _encoded(chunk: pa.Table, start: int, stop: int, source: str, seq: int) -> bytes:
    return orjson.dumps(_envelope(chunk.slice(start, stop - start), source, seq))


def _by_kind(rows: pa.Table) -> list[tuple[str, pa.Table]]:
    """The rows of each sample kind present (in ``SAMPLE_KINDS`` order), without copying when there is one.
    Rows whose kind is null or not a sample kind come last, a batch per value, for the decoder to
    dead-letter (``unknown_kind``)."""
    present, codes = kinds_of(rows.column("kind"))
    unknown = [k for k in present if k not in SAMPLE_KINDS]
    parts = []
    for kind in [k for k in SAMPLE_KINDS if k in present] + unknown:
        table = rows_at(rows, np.flatnonzero(codes == present.index(kind))) if len(present) > 1 else rows
        parts.append((kind, table))
    return parts


def _slices(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    """The rows of ``batches`` in tables of ``size`` rows (the last one shorter)."""
    held = pa.table({})
    for batch in batches:
        table = pa.Table.from_batches([batch])
        held = pa.concat_tables([held, table]) if held.num_rows else table
        while held.num_rows >= size:
            yield held.slice(0, size)
            held = held.slice(size)
    if held.num_rows:
        yield held


def _ahead(items: Iterator[T], depth: int) -> Iterator[T]:
    """``items``, made on a thread of their own at most ``depth`` ahead of the one read (it waits for room
    before it makes the next): reading and decoding a file (Arrow and numpy let go of the GIL meanwhile)
    overlaps the engine. The same items in the same order; an exception raised making one is raised here,
    where it would have been read; the thread ends with the reader."""
    made: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    room, stop = threading.Semaphore(depth), threading.Event()

    def make() -> None:
        try:
            while not stop.is_set():
                if not room.acquire(timeout=0.1):  # (a reader that stopped early takes nothing more)
                    continue
                item = next(items, made)  # (``made``: the end, as no item is that queue)
                if item is made:
                    made.put((False, None))
                    return
                made.put((True, item))
        except BaseException as exc:  # (handed to the reader, who raises it)
            made.put((False, exc))

    thread = threading.Thread(target=make, name=READ_AHEAD_THREAD, daemon=True)
    thread.start()
    try:
        while True:
            more, item = made.get()
            if not more:
                if item is not None:
                    raise item
                return
            room.release()
            yield item
    finally:
        stop.set()
        thread.join()


def trace_messages(paths: list[Path], job: str | None = None) -> Generator[Message, None, None]:
    """PyTorch profiler traces (one file per rank) as one input, step by step across ranks
    (:mod:`streams.formats.kineto`)."""
    name = str(paths[0])
    for position, value in enumerate(read_trace_files(paths, job=job), 1):
        yield Message("telemetry", value, SourcePosition(name, 0, position), oldest(orjson.loads(value)))


def _time(value: Any) -> float:
    try:
        return float(value.get("time", math.inf))
    except (TypeError, ValueError):
        return math.inf


def oldest(doc: dict[str, Any]) -> float:
    """The oldest event time of a telemetry envelope (inf when it has none that reads as a number: the
    processor judges the message itself)."""
    best = math.inf
    try:
        for sample in doc.get("samples") or ():
            best = min(best, float(sample[EVENT_TIME[sample["kind"]]]))
        for batch in doc.get("columns") or ():
            value = batch["data"][EVENT_TIME[batch["kind"]]]
            best = min(best, min(value) if isinstance(value, list) else float(value))
    except (TypeError, ValueError, KeyError, AttributeError):
        return best
    return best


def analyze_files(
    paths: list[Path], processor: Processor | None = None, progress: Progress | None = None, job: str | None = None
) -> Output:
    """Every file through one processor, then flushed: everything it emitted. ``job``: the job of profiler
    traces (default: from their file names)."""
    must_exist(paths)
    processor = processor or Processor()
    report = Report()
    traces = [p for p in paths if is_trace_file(p)]
    paths = [p for p in paths if p not in traces] + traces[:1]  # the profiler traces of all ranks: one input
    readers = [trace_messages(traces, job) if traces and p == traces[0] else messages_of(p, report) for p in paths]
    processor.declare(SourcePosition(str(p), 0, 0) for p in paths)
    total = sum(p.stat().st_size for p in paths) or 1
    out = Output()
    last = SourcePosition(str(paths[0]), 0, 0) if paths else SourcePosition("", 0, 0)
    # a k-way merge: always the file whose next message is oldest in event time (ties: the file listed first)
    heap: list[tuple[float, int, Message]] = []
    try:
        for i, reader in enumerate(readers):
            _push(heap, i, reader, paths[i])
        done = 0
        while heap:
            _, i, message = heapq.heappop(heap)
            last = message.source
            if message.kind == "telemetry":
                out.extend(processor.telemetry(message.value, message.source, decoded=message.decoded))
            else:
                assert isinstance(message.value, bytes)
                out.extend(processor.decision(message.value, message.source))
            if not _push(heap, i, readers[i], paths[i]):
                processor.timeline.forget(channel(message.source))
                done += paths[i].stat().st_size
            if progress is not None:
                progress(done, total)
    finally:  # (a file's reading ahead ends with its reader, whatever the engine raised)
        for reader in readers:
            reader.close()
    out.extend(processor.flush(last))
    if report.unreadable_count:
        raise ConfigError(
            f"{report.unreadable_count} unreadable lines, the first: {report.unreadable[0]}; "
            "fix or remove them and run again"
        )
    return out


def _push(heap: list[tuple[float, int, Message]], i: int, reader: Iterator[Message], path: Path) -> bool:
    try:
        message = next(reader, None)
    except pa.ArrowException as exc:  # (a file that is not Parquet, or is cut short or damaged)
        raise ConfigError(f"{path}: cannot read it as Parquet ({' '.join(str(exc).split())}); "
                          "fix or remove it and run again") from None  # fmt: skip
    if message is None:
        return False
    heapq.heappush(heap, (message.time, i, message))
    return True


def store_records(records: list[AuditRecord], store: AuditStore, topic: str) -> int:
    """Write records to an audit store as the sink would, in an order that depends on the input only: the
    engine's records (findings, attributions, roll-ups, graph changes) in partition 0 in the order the engine
    emitted them, and each input's own records (its decisions and dead letters) in a partition of their own,
    numbered by input name. Returns how many were written."""
    inputs = sorted({r.source.topic for r in records if r.type in ("decision", "dead_letter")})
    partition_of = {name: i + 1 for i, name in enumerate(inputs)}
    offsets = {p: o for (t, p), o in store.next_offsets().items() if t == topic}
    raw: list[RawRecord] = []
    for r in records:
        p = partition_of.get(r.source.topic, 0) if r.type in ("decision", "dead_letter") else 0
        offset = offsets.get(p, 0)
        offsets[p] = offset + 1
        raw.append(RawRecord(topic, p, offset, 0, r.key.encode(), r.encode()))
    raw.sort(key=lambda x: (x.partition, x.offset))
    if raw:
        store.write(raw)
    return len(raw)
