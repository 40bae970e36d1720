"""``driftlog produce FILE...``: push JSONL or Parquet files of samples and decisions to the topics.

Each row is one sample (its ``kind`` column, or ``--kind``) or one decision (kind ``decision``, or a
``schema`` of ``driftlog.decision/1``). ``--map old=new`` renames columns, ``--scale name=factor``
multiplies a numeric column (e.g. milliseconds → seconds), ``--set name=value`` adds a constant column.
Rows are renamed, scaled and completed in that order, then batched like the SDK does.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from streams.client import AsyncProducer
from streams.contract.schema import DECISION_SCHEMA, SAMPLE_KINDS
from streams.errors import ConfigError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Mapping:
    rename: dict[str, str] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    kind: str | None = None

    def apply(self, row: dict[str, Any]) -> dict[str, Any]:
        out = {self.rename.get(k, k): v for k, v in row.items()}
        for name, factor in self.scale.items():
            value = out.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[name] = value * factor
        for name, value in self.constants.items():
            out.setdefault(name, value)
        if self.kind is not None:
            out.setdefault("kind", self.kind)
        return out


def parse_pairs(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{option} takes name=value, got {pair!r}")
        out[key] = value
    return out


def constant(text: str) -> Any:
    """``--set`` values: JSON when they parse as JSON (numbers, true, lists), else the string itself."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


@dataclass
class Report:
    samples: Counter[str] = field(default_factory=Counter)
    decisions: int = 0
    unreadable: list[str] = field(default_factory=list)  # "FILE:LINE: why", first 20
    unreadable_count: int = 0

    def skip(self, where: str) -> None:
        self.unreadable_count += 1
        if len(self.unreadable) < 20:
            self.unreadable.append(where)


def rows_of(path: Path, report: Report) -> Iterator[dict[str, Any]]:
    """Rows of a .jsonl/.ndjson or .parquet file (other suffixes are refused)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
            yield from batch.to_pylist()
    elif suffix in (".jsonl", ".ndjson", ".json"):
        with path.open("rb") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    report.skip(f"{path}:{number}: not JSON ({exc})")
                    continue
                if type(row) is not dict:
                    report.skip(f"{path}:{number}: a JSON {type(row).__name__}, not an object")
                    continue
                yield row
    else:
        raise ConfigError(f"{path}: unknown file type {suffix!r}; use .jsonl, .ndjson or .parquet")


def must_exist(paths: list[Path]) -> None:
    """Every input file is there before any is read (a typo found after minutes of work is found late)."""
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{path}: no such file; check the path (inputs: JSONL, Parquet or profiler trace files)")


async def produce_files(
    paths: list[Path], producer: AsyncProducer, mapping: Mapping, progress: Progress, every: int = 100_000
) -> Report:
    report = Report()
    must_exist(paths)
    last = time.monotonic()
    for path in paths:
        for number, raw_row in enumerate(rows_of(path, report), 1):
            row = mapping.apply(raw_row)
            kind = row.pop("kind", None)
            if kind == "decision" or row.get("schema") == DECISION_SCHEMA:
                row.pop("schema", None)
                await producer.decision(**row)
                report.decisions += 1
            elif kind in SAMPLE_KINDS:
                await producer.add(str(kind), row)
                report.samples[str(kind)] += 1
            else:
                report.skip(f"{path}:row {number}: kind {kind!r} is not one of {[*SAMPLE_KINDS, 'decision']}")
            if number % every == 0 and time.monotonic() - last > 1:
                last = time.monotonic()
                progress(f"{path.name}: {number:,} rows read")
    await producer.flush()
    return report
