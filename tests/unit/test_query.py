from pathlib import Path

import pytest

from audit.duckdb_store import DuckDBStore
from audit.query import run_query
from audit.sql_run import Limits
from audit.store import RawRecord
from streams.errors import QueryError


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "q.duckdb"
    s = DuckDBStore(path)
    s.write([RawRecord("audit", 0, i, 0, None, b"{}") for i in range(5)])
    s.close()
    return path


def test_select_returns_columns_and_rows(db: Path) -> None:
    r = run_query(db, 'SELECT count(*) AS n, max("offset") AS last FROM audit_log')
    assert r.columns == ["n", "last"]
    assert r.rows == [(5, 4)]
    assert r.records() == [{"n": 5, "last": 4}]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM audit_log",
        "INSERT INTO sink_offsets VALUES ('x', 0, 0)",
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY audit_log TO '/tmp/driftlog-leak.csv'",
        "ATTACH '/tmp/other.duckdb' AS o",
        "SET enable_external_access = true",
    ],
)
def test_writes_files_and_config_changes_are_refused(db: Path, sql: str) -> None:
    with pytest.raises(QueryError):
        run_query(db, sql)
    assert run_query(db, "SELECT count(*) FROM audit_log").rows == [(5,)]


def test_row_limit(db: Path) -> None:
    with pytest.raises(QueryError, match="more than 3 rows"):
        run_query(db, "SELECT * FROM audit_log", limits=Limits(max_rows=3))


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(QueryError, match="run the sink first"):
        run_query(tmp_path / "nope.duckdb", "SELECT 1")
