"""The engine over files, without Kafka (``driftlog analyze``): the same processor the live worker runs.

Each file is an input channel. A line (JSONL) or row (Parquet) is either a whole Kafka value — a telemetry
envelope or a decision, as ``driftlog simulate --out`` writes them — or one sample or decision row (its
``kind`` column), which are batched into envelopes per file. Files are read side by side, always from the
one whose event time is furthest behind, so the watermark advances and memory stays bounded however the
files are listed. Provenance of a record: topic = the file's path, offset = its line (or row) number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from audit.records import AuditRecord, SourcePosition
from audit.store import AuditStore, RawRecord
from streams.contract.schema import DECISION_SCHEMA, SAMPLE_KINDS, TELEMETRY_SCHEMA
from streams.errors import ConfigError
from streams.pipeline import Output, Processor, channel
from streams.produce import Report, rows_of

ROWS_PER_MESSAGE = 5000
Progress = Callable[[int, int], None]  # (bytes read, bytes in all)


@dataclass(frozen=True)
class Message:
    kind: str  # telemetry | decisions
    value: bytes
    source: SourcePosition


def messages_of(path: Path, report: Report) -> Iterator[Message]:
    """A file's Kafka values, in file order."""
    rows: list[dict[str, Any]] = []
    seq = 0
    position = 0

    def batch() -> Message:
        nonlocal seq, rows
        doc = {"schema": TELEMETRY_SCHEMA, "source": f"file:{path.name}", "seq": seq, "samples": rows}
        seq, rows = seq + 1, []
        return Message("telemetry", orjson.dumps(doc), SourcePosition(str(path), 0, position))

    for position, row in enumerate(rows_of(path, report), 1):
        schema = row.get("schema")
        if schema == TELEMETRY_SCHEMA:
            yield Message("telemetry", orjson.dumps(row), SourcePosition(str(path), 0, position))
        elif schema == DECISION_SCHEMA or row.get("kind") == "decision":
            row.pop("kind", None)
            row["schema"] = DECISION_SCHEMA
            yield Message("decisions", orjson.dumps(row), SourcePosition(str(path), 0, position))
        elif row.get("kind") in SAMPLE_KINDS:
            rows.append(row)
            if len(rows) >= ROWS_PER_MESSAGE:
                yield batch()
        else:
            report.skip(f"{path}:{position}: neither an envelope, a decision nor a sample (kind {row.get('kind')!r})")
    if rows:
        yield batch()


def analyze_files(
    paths: list[Path], processor: Processor | None = None, progress: Progress | None = None
) -> Output:
    """Every file through one processor, then flushed: everything it emitted."""
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{path}: no such file")
    processor = processor or Processor()
    report = Report()
    readers = {str(p): messages_of(p, report) for p in paths}
    processor.declare(SourcePosition(name, 0, 0) for name in readers)
    total_bytes = sum(p.stat().st_size for p in paths) or 1
    out = Output()
    last = SourcePosition(str(paths[0]), 0, 0) if paths else SourcePosition("", 0, 0)
    done_bytes = 0
    while readers:
        # the file furthest behind in event time goes next (a file not yet read first)
        name = min(readers, key=lambda n: (processor.timeline.newest(channel(SourcePosition(n, 0, 0))), n))
        message = next(readers[name], None)
        if message is None:
            del readers[name]
            processor.timeline.forget(channel(SourcePosition(name, 0, 0)))
            done_bytes += Path(name).stat().st_size
            if progress is not None:
                progress(done_bytes, total_bytes)
            continue
        last = message.source
        handle = processor.telemetry if message.kind == "telemetry" else processor.decision
        out.extend(handle(message.value, message.source))
    out.extend(processor.flush(last))
    if report.unreadable_count:
        raise ConfigError(
            f"{report.unreadable_count} unreadable lines, the first: {report.unreadable[0]}; "
            "fix or remove them and run again"
        )
    return out


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
