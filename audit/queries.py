"""The named SQL library in ``sql/queries/*.sql``: each file says what it answers and its parameters.

Header lines (before the SQL): ``-- name: NAME``, ``-- answers: QUESTION``, and one
``-- param: NAME TYPE  description`` per parameter (TYPE: DOUBLE, BIGINT or VARCHAR); the SQL refers to
them as ``$NAME``. A DOUBLE parameter that is not a duration (``*_s``) is an event time: it takes seconds
since the epoch or an ISO-8601 date (``2026-01-01``, ``2026-01-01T12:00:00Z``; no zone: UTC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from audit.migrations import sql_dir
from audit.present import parse_time
from streams.errors import QueryError

_PARAM = re.compile(r"^--\s*param:\s*(\w+)\s+(DOUBLE|BIGINT|VARCHAR)\s+(.*)$")
_CASTS = {"DOUBLE": float, "BIGINT": int, "VARCHAR": str}


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    description: str


@dataclass(frozen=True)
class NamedQuery:
    name: str
    answers: str
    params: tuple[Param, ...]
    sql: str

    def bind(self, given: dict[str, str]) -> dict[str, Any]:
        """Typed parameter values from ``key=value`` strings; says which are missing, unknown or malformed."""
        names = {p.name for p in self.params}
        unknown = sorted(set(given) - names)
        missing = sorted(names - set(given))
        if unknown or missing:
            usage = " ".join(f"--param {p.name}=<{p.type}>" for p in self.params)
            raise QueryError(
                f"query {self.name} takes {usage or 'no parameters'} (missing {missing}, unknown {unknown})"
            )
        bound: dict[str, Any] = {}
        for p in self.params:
            takes_dates = p.type == "DOUBLE" and not p.name.endswith("_s")  # an event time, not a duration
            try:
                bound[p.name] = parse_time(given[p.name]) if takes_dates else _CASTS[p.type](given[p.name])
            except ValueError as exc:
                kind = f"{p.type} (seconds since the epoch) or an ISO-8601 date" if takes_dates else p.type
                raise QueryError(f"parameter {p.name} of {self.name} must be {kind}: {given[p.name]!r}") from exc
        return bound


def _parse(text: str, origin: str) -> NamedQuery:
    header: dict[str, str] = {}
    params = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        if m := _PARAM.match(line):
            params.append(Param(m.group(1), m.group(2), m.group(3).strip()))
        elif m := re.match(r"^--\s*(name|answers):\s*(.*)$", line):
            header[m.group(1)] = m.group(2).strip()
    if "name" not in header or "answers" not in header:
        raise QueryError(f"{origin} lacks its '-- name:' or '-- answers:' header")
    return NamedQuery(header["name"], header["answers"], tuple(params), text)


@cache
def library() -> dict[str, NamedQuery]:
    queries = [_parse(p.read_text(), p.name) for p in sorted((sql_dir() / "queries").glob("*.sql"))]
    return {q.name: q for q in queries}


def named(name: str) -> NamedQuery:
    try:
        return library()[name]
    except KeyError:
        raise QueryError(f"no named query {name!r}; `driftlog query --list` shows them") from None
