"""Which sources ``driftlog produce`` has sent from this machine, so that a re-send is warned about.

Messages carry ``(source, seq)`` with ``seq`` counting from 0 for each run, and the worker refuses a
``(source, seq)`` it has seen as a duplicate: a file sent again under the same source is dead-lettered
whole. The log lives in ``DRIFTLOG_HOME/produced-sources.json`` (source → when, files, messages).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FILE_NAME = "produced-sources.json"


def _read(home: Path) -> dict[str, Any]:
    try:
        data = json.loads((home / FILE_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def previous(home: Path, source: str) -> dict[str, Any] | None:
    """What was sent under ``source`` before (``at``, ``files``, ``messages``), or None."""
    entry = _read(home).get(source)
    return entry if isinstance(entry, dict) else None


def remember(home: Path, source: str, files: list[str], messages: int) -> None:
    """Record a send (best effort: a read-only home only loses the warning)."""
    data = _read(home)
    data[source] = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "files": files, "messages": messages}
    try:
        home.mkdir(parents=True, exist_ok=True)
        partial = home / (FILE_NAME + f".{os.getpid()}")
        partial.write_text(json.dumps(data, indent=1))
        partial.replace(home / FILE_NAME)
    except OSError:
        pass


def warning(source: str, before: dict[str, Any]) -> str:
    return (
        f"driftlog: warning: source {source!r} already sent {before.get('messages', '?')} messages from this "
        f"machine ({before.get('at', '?')}, {', '.join(before.get('files', [])) or '?'}); the worker refuses a "
        "(source, seq) it has seen, so these would be dead-lettered as duplicates: pass --source NEW-NAME to "
        "send them as new data"
    )
