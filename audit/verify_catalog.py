"""The store's schema objects are the migrations' own: every table, view, macro and function, type,
trigger, sequence and index (a macro named like a built-in the views call can change what they show), and
``schema_migrations`` records every migration.

The stored catalog is read from an attachment (``STORE``) so that nothing defined in the file can stand in
for what ``verify`` itself calls.
"""

from __future__ import annotations

import duckdb

from audit.migrations import available, migrate

STORE = "store"
_OBJECTS = {
    "table": "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = $db",
    "view": "SELECT view_name, sql FROM duckdb_views() WHERE database_name = $db AND NOT internal",
    "macro or function": "SELECT schema_name || '.' || function_name || '/' || function_type,"
    " string_agg(coalesce(macro_definition, '') || '(' || array_to_string(parameters, ',') || ')', ';' ORDER BY"
    " macro_definition) FROM duckdb_functions() WHERE database_name = $db AND NOT internal GROUP BY ALL",
    "type": "SELECT type_name, logical_type FROM duckdb_types() WHERE database_name = $db AND NOT internal",
    "trigger": "SELECT trigger_name, sql FROM duckdb_triggers() WHERE database_name = $db",
    "sequence": "SELECT sequence_name, sql FROM duckdb_sequences() WHERE database_name = $db",
    "index": "SELECT index_name, sql FROM duckdb_indexes() WHERE database_name = $db",
}


def check_catalog(con: duckdb.DuckDBPyConnection) -> list[str]:
    """A problem for each schema object of the attached store that the migrations do not define alike."""
    fresh = duckdb.connect()
    migrate(fresh)
    problems = []
    for kind, query in _OBJECTS.items():
        expected = dict(fresh.execute(query, {"db": "memory"}).fetchall())
        stored = dict(con.execute(query, {"db": STORE}).fetchall())
        for name in sorted(set(expected) | set(stored)):
            if name not in stored:
                problems.append(f"{kind} {name} is missing (dropped)")
            elif name not in expected:
                problems.append(f"{kind} {name} is not one the migrations define (added)")
            elif expected[name] != stored[name]:
                problems.append(f"{kind} {name} is not the one the migrations define (altered)")
    fresh.close()
    recorded = {v for (v,) in con.execute(f"SELECT version FROM {STORE}.schema_migrations").fetchall()}
    missing = [f"{v:04d}_{name}" for v, name, _ in available() if v not in recorded]
    if missing:
        problems.append(f"schema_migrations lacks {', '.join(missing)} (the sink could not open the file again)")
    return problems
