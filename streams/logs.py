"""Structured, quiet-by-default logging shared by every process (a ``logging.config`` dict)."""

from __future__ import annotations

import logging
import logging.config
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra=`` fields given."""

    _STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def config_dict(level: str, fmt: str) -> dict[str, Any]:
    formatter = (
        {"()": JsonFormatter} if fmt == "json" else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
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
