"""How query results read in a terminal and in CSV: lists and objects as JSON, event times as ISO-8601.

Event times are stored as seconds since the epoch (DOUBLE). In table and CSV output a number in a time
column (``time``, ``start``, ``end``, ``at``, ``*_time``, ``*_at``) that is a plausible epoch time (after
1973) is shown as ISO-8601 UTC with milliseconds; smaller numbers are relative times and stay numbers.
JSON output keeps the stored values.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

_TIME_COLUMN = re.compile(r"^(time|start|end|at)$|_(time|at)$")
_EPOCH_FLOOR = 1e8  # 1973-03-03: below this a "time" is relative (simulated steps, durations)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cell(column: str, value: Any) -> str:
    """One value as text for a table or CSV cell."""
    if value is None:
        return "NULL"
    if isinstance(value, (list, dict, tuple)):
        return orjson.dumps(value, default=str).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and _TIME_COLUMN.search(column) and value >= _EPOCH_FLOOR:
        try:
            return iso(float(value))
        except (OverflowError, OSError, ValueError):
            return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def parse_time(text: str) -> float:
    """Seconds since the epoch from a number or an ISO-8601 date/time (no zone: UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()
