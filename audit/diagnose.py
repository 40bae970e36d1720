"""Why a DuckDB file could not be opened, in words that say what to do (not DuckDB's own guess)."""

from __future__ import annotations

import os
from pathlib import Path


def open_failure(path: Path, exc: BaseException, read_only: bool = False) -> str:
    """One line naming the real cause: a directory, a missing or unwritable directory, not a DuckDB file,
    or a lock held by another process (DuckDB's message is kept at the end)."""
    detail = " ".join(str(exc).split())
    mode = "reading" if read_only else "writing"
    if path.is_dir():
        return f"{path} is a directory, not a DuckDB file: give a file path, e.g. --db {path / 'driftlog.duckdb'}"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"cannot open {path}: directory {parent} does not exist (create it, or give another --db)"
    if read_only and not path.exists():
        return f"{path} does not exist: give the sink's DuckDB file with --db (or DRIFTLOG_DB_PATH)"
    if not read_only and not os.access(parent, os.W_OK):
        return f"cannot open {path} for writing: directory {parent} is not writable by this user"
    lowered = detail.lower()
    if "lock" in lowered or "conflicting" in lowered:
        return f"cannot open {path} for {mode}: another process holds it ({detail})"
    if "not a valid duckdb" in lowered or "not a duckdb" in lowered or ("invalid" in lowered and "header" in lowered):
        return f"{path} is not a DuckDB database file: give the sink's DuckDB file with --db ({detail})"
    return f"cannot open {path} for {mode}: {detail}"


def duckdb_message(exc: BaseException) -> str:
    """DuckDB's error on one line, its hints kept ("Did you mean "findings"?"), the echoed query and caret
    (``LINE 1: ...``) left out."""
    kept = []
    for line in str(exc).splitlines():
        if line.startswith("LINE "):
            break
        if line.strip():
            kept.append(line.strip())
    return " ".join(kept)
