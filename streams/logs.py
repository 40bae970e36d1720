"""Structured, quiet-by-default logging shared by every process (a ``logging.config`` dict)."""

from __future__ import annotations

import logging
import logging.config
import re
import time
from typing import Any

import orjson

_CONTROL = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (window titles, links)
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor moves)
    r"|\x1b[@-_]"  # other escapes
    r"|[\x00-\x08\x0b-\x1f\x7f]"  # other control characters (tab and newline kept)
)


def plain(text: str) -> str:
    """``text`` without terminal control sequences (colours, cursor moves) or other control characters."""
    return _CONTROL.sub("", text)


class RateLimit(logging.Filter):
    """At most ``burst`` lines per ``interval_s`` for each (logger, message template); the next line that
    passes says how many were dropped. Keeps a broker outage from flooding the log with the same retry line."""

    def __init__(self, interval_s: float = 10.0, burst: int = 3, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.interval_s, self.burst, self.clock = interval_s, burst, clock
        self._windows: dict[tuple[str, str], list[float]] = {}  # key -> [window start, passed, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key, now = (record.name, str(record.msg)), self.clock()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval_s:
            dropped = 0 if window is None else int(window[2])
            if len(self._windows) > 10_000:
                self._windows.clear()
            self._windows[key] = [now, 1, 0]
            if dropped:
                record.suppressed = dropped  # shown as a field (JSON) of the first line after the flood
            return True
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        return False


class PlainFormatter(logging.Formatter):
    """The text format, without terminal control codes."""

    def format(self, record: logging.LogRecord) -> str:
        return plain(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra=`` fields given."""

    _STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": plain(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def config_dict(level: str, fmt: str) -> dict[str, Any]:
    formatter = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"()": PlainFormatter, "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"rate_limit": {"()": RateLimit}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
                "filters": ["rate_limit"],
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        # these libraries are chatty at INFO; driftlog's own loggers follow the chosen level
        "loggers": {
            **{name: {"level": max(level.upper(), "WARNING", key=_rank)} for name in ("faust", "mode", "aiokafka")},
            # "retrying after NotLeaderForPartition" just after a topic is created: retried, then fine
            "aiokafka.producer.sender": {"level": max(level.upper(), "ERROR", key=_rank)},
        },
    }


def _rank(level: str) -> int:
    return logging.getLevelName(level)  # type: ignore[no-any-return]


def configure(level: str, fmt: str) -> None:
    logging.config.dictConfig(config_dict(level, fmt))
