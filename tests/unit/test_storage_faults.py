"""Storage faults say what they are: the real error (e.g. No space left on device), not a consequence of it
("cannot rollback - no transaction is active"); nothing of the failed batch is stored; the store goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from audit.duckdb_store import DuckDBStore
from audit.store import RawRecord
from streams.errors import StoreError


class DiskFullOnCommit:
    """A connection whose COMMIT fails the way DuckDB's does when the disk is full: the transaction is
    over (rolled back) and the error names the cause."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.con.execute("ROLLBACK")
            raise duckdb.IOException('IO Error: Could not write file "audit.duckdb.wal": No space left on device')
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def records(start: int, n: int) -> list[RawRecord]:
    return [RawRecord("audit", 0, o, 1000 + o, b"k", b'{"v":1,"type":"finding","id":"f%d","body":{}}' % o)
            for o in range(start, start + n)]  # fmt: skip


def test_a_full_disk_is_reported_as_such_and_nothing_is_stored(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "a.duckdb")
    store.write(records(0, 5))
    real = store.con
    store.con = DiskFullOnCommit(real)  # type: ignore[assignment]
    with pytest.raises(StoreError, match="No space left on device") as caught:
        store.write(records(5, 5))
    assert "no transaction is active" not in str(caught.value)
    store.con = real
    assert store.next_offsets() == {("audit", 0): 5}
    store.write(records(5, 5))  # space again: the same records go in, once
    assert real.execute('SELECT count(*), max("offset") FROM audit_log').fetchone() == (10, 9)
    store.close()


def test_a_directory_that_is_not_writable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from audit.diagnose import open_failure

    monkeypatch.setattr("os.access", lambda *_: False)  # root may write anywhere: pretend it may not
    why = open_failure(tmp_path / "a.duckdb", duckdb.IOException("IO Error: Cannot open file: Permission denied"))
    assert why == f"cannot open {tmp_path / 'a.duckdb'} for writing: directory {tmp_path} is not writable by this user"
