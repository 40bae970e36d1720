"""Messages that fit Kafka's defaults: a batch of rows is split into as few parts as keep every encoded
message at or under ``MAX_MESSAGE_BYTES`` (a broker's default ``message.max.bytes`` is 1,048,588 and a
producer's default ``max.request.size`` 1,048,576; the margin leaves room for the record's key, headers and
batch framing)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from streams.sim.base import envelope

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


def sized_envelopes(source: str, seq: int, batches: list[dict[str, Any]],
                    limit: int = MAX_MESSAGE_BYTES) -> list[bytes]:  # fmt: skip
    """A telemetry message of columnar ``batches``, or, when it would not fit ``limit``, several: the rows of
    all batches in order, split evenly (parts after the first are their own sources, ``<source>/part<i>``)."""
    total = sum(int(b["n"]) for b in batches)

    def encode(part: int, parts: int, lo: int, hi: int) -> bytes:
        if parts == 1:
            return envelope(source, seq, batches)
        return envelope(f"{source}/part{part}" if part else source, seq, _rows(batches, lo, hi))

    return split_by_size(total, encode, limit)


def _rows(batches: list[dict[str, Any]], lo: int, hi: int) -> list[dict[str, Any]]:
    """Rows ``lo`` to ``hi`` of the batches taken as one sequence (columns that are scalars stay as they are)."""
    out, offset = [], 0
    for b in batches:
        n = int(b["n"])
        a, z = max(lo, offset) - offset, min(hi, offset + n) - offset
        if a < z:
            data = {k: v[a:z] if isinstance(v, list | np.ndarray) else v for k, v in b["data"].items()}
            out.append({**b, "n": z - a, "data": data})
        offset += n
    return out
