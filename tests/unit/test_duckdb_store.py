from pathlib import Path

import duckdb
import orjson
import pytest

from audit.duckdb_store import DuckDBStore
from audit.migrations import available, migrate
from audit.records import AuditRecord, SourcePosition
from audit.store import MemoryStore, RawRecord
from streams.engine.findings import Finding
from streams.errors import StoreError


def finding_record(start: float = 1.0) -> bytes:
    f = Finding("step_time_drift", ("job:a",), start, start + 5, 1.3, {"onset_step": 3}, {"extra_step_seconds": 2.5})
    return AuditRecord("finding", f.id, SourcePosition("tele", 0, 9), f.as_dict(), "job:a").encode()


def raw(offset: int, value: bytes, partition: int = 0) -> RawRecord:
    return RawRecord("audit", partition, offset, 1_700_000_000_000, b"k", value)


@pytest.fixture
def store(tmp_path: Path, chain_impl: str) -> DuckDBStore:
    return DuckDBStore(tmp_path / "a.duckdb")


def test_rows_and_offsets_are_stored_together(store: DuckDBStore) -> None:
    store.write([raw(0, finding_record()), raw(1, finding_record(2.0)), raw(5, finding_record(3.0), partition=1)])
    assert store.next_offsets() == {("audit", 0): 2, ("audit", 1): 6}
    assert store.con.execute("SELECT count(*) FROM audit_log").fetchone() == (3,)
    rows = store.con.execute(
        "SELECT kind, subjects, start_time, cost->>'extra_step_seconds' FROM findings ORDER BY start_time"
    ).fetchall()
    assert rows == [("step_time_drift", ["job:a"], s, "2.5") for s in (1.0, 2.0, 3.0)]


def test_redelivered_finding_is_logged_but_counted_once(store: DuckDBStore) -> None:
    store.write([raw(0, finding_record()), raw(1, finding_record())])
    store.write([raw(2, finding_record())])
    assert store.con.execute("SELECT count(*) FROM audit_log").fetchone() == (3,)
    assert store.con.execute("SELECT count(*) FROM findings").fetchone() == (1,)


def test_foreign_bytes_are_kept_as_invalid_without_breaking_the_batch(store: DuckDBStore) -> None:
    store.write([raw(0, b"\xff\xfe not json"), raw(1, b'{"type": "finding", "id": "x"}'), raw(2, finding_record())])
    types = store.con.execute('SELECT record_type FROM audit_log ORDER BY "offset"').fetchall()
    assert types == [("invalid",), ("invalid",), ("finding",)]
    assert store.next_offsets() == {("audit", 0): 3}


def test_failed_batch_stores_nothing(store: DuckDBStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.write([raw(0, finding_record())])
    from audit import duckdb_store

    monkeypatch.setattr(duckdb_store, "_INSERTS", [*duckdb_store._INSERTS, "SELECT error('disk on fire')"])
    with pytest.raises(StoreError, match="nothing was stored"):
        store.write([raw(1, finding_record(9.0))])
    assert store.next_offsets() == {("audit", 0): 1}
    assert store.con.execute("SELECT count(*) FROM audit_log").fetchone() == (1,)


def test_migrations_are_recorded_and_applied_once(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "m.duckdb"))
    assert migrate(con) == [v for v, _, _ in available()]
    assert migrate(con) == []
    names = con.execute("SELECT name FROM schema_migrations ORDER BY version").fetchall()
    assert names[0] == ("audit_log",)


def test_reopening_keeps_offsets(tmp_path: Path) -> None:
    s = DuckDBStore(tmp_path / "a.duckdb")
    s.write([raw(0, finding_record())])
    s.close()
    assert DuckDBStore(tmp_path / "a.duckdb").next_offsets() == {("audit", 0): 1}


def test_second_writer_gets_a_clear_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    holder = DuckDBStore(tmp_path / "a.duckdb")  # held open by this process
    code = (
        f"from audit.duckdb_store import DuckDBStore; from pathlib import Path; "
        f"DuckDBStore(Path({str(tmp_path / 'a.duckdb')!r}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "another process" in proc.stderr
    holder.close()


def test_memory_store_has_the_same_offset_semantics() -> None:
    m = MemoryStore()
    m.write([raw(0, b"a"), raw(4, b"b"), raw(2, b"c", partition=1)])
    assert m.next_offsets() == {("audit", 0): 5, ("audit", 1): 3}


def test_decisions_and_dead_letters_land_in_their_tables(store: DuckDBStore) -> None:
    from streams.synthetic import envelope
    from streams.testing import run_messages
    from tests.unit.test_pipeline import DECISION

    bad = [{"kind": "step", "job": "x", "step": i, "start": 0.0, "duration": -1.0} for i in range(2)]
    out = run_messages(
        [b"{oops", envelope(bad, "s")],
        decisions=[orjson.dumps(DECISION), orjson.dumps(DECISION)],
    )
    store.write([raw(i, r.encode()) for i, r in enumerate(out.audit)])
    assert store.con.execute(
        "SELECT id, layer, action, targets, parameters->>'cap_w', expected_metric, expected_direction FROM decisions"
    ).fetchall() == [("d-1", "power", "power_cap", ["node:n7"], "450", "power_w", "down")]
    assert store.con.execute(
        "SELECT reason, sample_count, sample_indices, whole_message, source_topic, source_offset FROM dead_letters"
        " ORDER BY source_topic, source_offset"
    ).fetchall() == [
        ("duplicate", 1, [], True, "decisions", 1),
        ("malformed_json", 1, [], True, "telemetry", 0),
        ("out_of_range", 2, [0, 1], False, "telemetry", 1),
    ]


@pytest.mark.parametrize("stem", ["s", "c", "audit_log"])
def test_a_database_file_may_be_named_like_an_alias_in_the_views(tmp_path: Path, stem: str) -> None:
    # DuckDB names the catalog after the file: s.duckdb once broke the views' s."body"."kind" (catalog.schema.table)
    store = DuckDBStore(tmp_path / f"{stem}.duckdb")
    store.close()
    con = duckdb.connect(str(tmp_path / f"{stem}.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM findings").fetchone() == (0,)
