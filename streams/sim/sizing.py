"""Messages that fit Kafka's defaults: a batch of rows is split into as few parts as keep every encoded
message at or under ``MAX_MESSAGE_BYTES`` (a broker's default ``message.max.bytes`` is 1,048,588 and a
producer's default ``max.request.size`` 1,048,576; the margin leaves room for the record's key, headers and
batch framing)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

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
