"""Telemetry messages that fit Kafka's defaults, whoever writes them (the SDK, `driftlog produce`, the
simulator): rows are split into as few messages as keep every message at or under ``MAX_MESSAGE_BYTES``.

A broker's default ``message.max.bytes`` is 1,048,588 and a producer's default ``max.request.size``
1,048,576; the margin leaves room for the record's key, headers and batch framing. A message split in parts
keeps its ``seq``; the parts after the first are their own sources, ``<source>/part<i>``, so each part is
still recognised as a duplicate when it is sent again, and no two parts are taken for one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

MAX_MESSAGE_BYTES = 1_000_000

Encode = Callable[[int, int, int, int], bytes]  # (part, parts, lo, hi) -> the message of rows lo..hi


def split_by_size(rows: int, encode: Encode, limit: int = MAX_MESSAGE_BYTES) -> list[bytes]:
    """The messages of ``rows`` rows in the fewest equal parts whose every message fits ``limit`` (one row
    per part at most: a single row that does not fit is sent as it is)."""
    parts = 1
    while True:
        bounds = [rows * i // parts for i in range(parts + 1)]
        messages = [encode(i, parts, lo, hi) for i, (lo, hi) in enumerate(itertools.pairwise(bounds))]
        biggest = max(len(m) for m in messages)
        if biggest <= limit or parts >= rows:
            return messages
        parts = min(rows, max(parts + 1, math.ceil(parts * biggest / limit)))


def part_source(source: str, part: int) -> str:
    return f"{source}/part{part}" if part else source


def column_rows(batches: list[dict[str, Any]], lo: int, hi: int) -> list[dict[str, Any]]:
    """Rows ``lo`` to ``hi`` of column batches taken as one sequence (columns that are scalars stay as
    they are)."""
    out, offset = [], 0
    for b in batches:
        n = int(b["n"])
        a, z = max(lo, offset) - offset, min(hi, offset + n) - offset
        if a < z:
            data = {k: v[a:z] if isinstance(v, list | np.ndarray) else v for k, v in b["data"].items()}
            out.append({**b, "n": z - a, "data": data})
        offset += n
    return out


def fit_document(doc: dict[str, Any], limit: int = MAX_MESSAGE_BYTES) -> list[bytes]:
    """A telemetry envelope (``samples`` row-wise first, then ``columns``) encoded as one message, or as
    several when it does not fit ``limit``: its rows in order, split evenly. Anything not a list of rows
    (an envelope the service will refuse) is encoded as it is, so the service names what is wrong."""
    samples, batches = doc.get("samples") or [], doc.get("columns") or []
    if not isinstance(samples, list) or not isinstance(batches, list) or not _countable(batches):
        return [_dumps(doc)]
    rows = len(samples) + sum(int(b["n"]) for b in batches)
    head = {k: v for k, v in doc.items() if k not in ("samples", "columns")}
    source = str(doc.get("source", ""))

    def encode(part: int, parts: int, lo: int, hi: int) -> bytes:
        if parts == 1:
            return _dumps(doc)
        out: dict[str, Any] = {**head, "source": part_source(source, part)}
        if lo < len(samples):
            out["samples"] = samples[lo : min(hi, len(samples))]
        cols = column_rows(batches, max(lo - len(samples), 0), max(hi - len(samples), 0))
        if cols:
            out["columns"] = cols
        return _dumps(out)

    return split_by_size(max(rows, 1), encode, limit)


def fit(value: bytes, limit: int = MAX_MESSAGE_BYTES) -> list[bytes]:
    """``value`` (an encoded telemetry envelope) as it is when it fits ``limit``, else split by rows; a value
    that is not a JSON object is left for the service to refuse."""
    if len(value) <= limit:
        return [value]
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return [value]
    return fit_document(doc, limit) if isinstance(doc, dict) else [value]


def _countable(batches: list[Any]) -> bool:
    return all(isinstance(b, dict) and isinstance(b.get("n"), int) and isinstance(b.get("data"), dict)
               for b in batches)  # fmt: skip


def _dumps(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY, default=str)
