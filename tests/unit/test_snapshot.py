"""The snapshots SQL is served from: complete, in order, few files, resumable, replaced files kept a while."""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import pytest

from audit import snapshot
from audit.duckdb_store import DuckDBStore
from audit.snapshot import FAN_IN, MANIFEST, SCHEMA_CATALOG, Manifest, Publisher, _migration_views, open_snapshot
from audit.store import RawRecord


def finding(i: int) -> bytes:
    return orjson.dumps({"v": 1, "type": "finding", "id": f"f{i}", "body": {"kind": "k", "start": i}})


def write(store: DuckDBStore, start: int, n: int) -> None:
    store.write([RawRecord("audit", i % 3, i // 3, i, None, finding(i)) for i in range(start, start + n)])


def rows(directory: Path) -> list[tuple[int, int]]:
    snap = open_snapshot(directory)
    assert snap is not None
    return [(p, o) for p, o in snap.con.execute('SELECT "partition", "offset" FROM audit_log').fetchall()]


@pytest.fixture
def store(tmp_path: Path) -> DuckDBStore:
    return DuckDBStore(tmp_path / "a.duckdb")


def test_every_committed_row_is_published_in_order_in_few_files(store: DuckDBStore, tmp_path: Path) -> None:
    snap_dir = tmp_path / "snap"
    publisher = Publisher(store.con.cursor(), snap_dir, 0.1, grace_s=0)
    for k in range(3 * FAN_IN * FAN_IN // 2):
        write(store, 10 * k, 10)
        assert publisher.publish(publisher.changes())
        assert not publisher.publish(publisher.changes())  # nothing new: nothing done
    expected = store.con.execute('SELECT "partition", "offset" FROM audit_log ORDER BY rowid').fetchall()
    assert rows(snap_dir) == expected and len(expected) == 10 * 3 * FAN_IN * FAN_IN // 2
    manifest = Manifest.load(snap_dir)
    assert manifest is not None and len(manifest.segments) < 2 * FAN_IN
    on_disk = {p.name for p in snap_dir.iterdir() if not p.name.startswith("catalog-")}
    assert on_disk == {MANIFEST, *(s.name for s in manifest.segments), *manifest.tables.values()}
    snap = open_snapshot(snap_dir)
    assert snap is not None
    assert snap.con.execute("SELECT count(*) FROM findings").fetchall() == [(len(expected),)]
    assert snap.con.execute("SELECT sum(next_offset) FROM sink_offsets").fetchall() == [(len(expected),)]


def test_replaced_files_are_kept_for_the_grace_period(store: DuckDBStore, tmp_path: Path) -> None:
    snap_dir = tmp_path / "snap"
    publisher = Publisher(store.con.cursor(), snap_dir, 0.1, grace_s=3600)
    for k in range(FAN_IN + 1):
        write(store, 10 * k, 10)
        publisher.publish(publisher.changes())
    manifest = Manifest.load(snap_dir)
    assert manifest is not None
    kept = {p.name for p in snap_dir.iterdir()} - {MANIFEST, *(s.name for s in manifest.segments)}
    assert len([n for n in kept if n.startswith("audit_log-")]) == FAN_IN  # merged away, still readable


def test_a_restarted_publisher_resumes_or_starts_again(store: DuckDBStore, tmp_path: Path) -> None:
    snap_dir = tmp_path / "snap"
    first = Publisher(store.con.cursor(), snap_dir, 0.1, grace_s=0)
    write(store, 0, 30)
    first.publish()
    write(store, 30, 30)
    again = Publisher(store.con.cursor(), snap_dir, 0.1, grace_s=0)
    assert again.manifest.rows == 30  # resumed
    again.publish()
    assert len(rows(snap_dir)) == 60
    other = DuckDBStore(tmp_path / "b.duckdb")  # a manifest of another, smaller file is not resumed
    write(other, 0, 5)
    fresh = Publisher(other.con.cursor(), snap_dir, 0.1, grace_s=0)
    assert fresh.manifest.rows == 0
    fresh.publish()
    assert len(rows(snap_dir)) == 5
    assert sum(1 for p in snap_dir.iterdir() if p.name.startswith("audit_log-")) == 1


def test_the_snapshot_reads_nothing_outside_its_directory(store: DuckDBStore, tmp_path: Path) -> None:
    write(store, 0, 3)
    Publisher(store.con.cursor(), tmp_path / "snap", 0.1, grace_s=0).publish()
    snap = open_snapshot(tmp_path / "snap")
    assert snap is not None
    store.close()
    beside = tmp_path / "snap" / "new.duckdb"
    for sql in (
        f"SELECT * FROM read_blob('{store.path}')",
        f"ATTACH '{store.path}' AS s (READ_ONLY)",
        f"ATTACH '{beside}' AS n",
        f"COPY (SELECT 1) TO '{beside}.csv'",
    ):
        with pytest.raises(duckdb.PermissionException):
            snap.con.execute(sql)
    with pytest.raises(duckdb.InvalidInputException, match="lock"):
        snap.con.execute("SET threads = 4")
    for ddl in ("CREATE MACRO json_transform(a, b) AS 1", "CREATE OR REPLACE VIEW findings AS SELECT 1"):
        with pytest.raises(duckdb.Error, match="read-only"):
            snap.con.execute(ddl)  # the snapshot's own catalog is read-only too
    assert not beside.exists() and not Path(f"{beside}.csv").exists()


def test_a_large_store_is_published_in_bounded_chunks(
    store: DuckDBStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import audit.snapshot

    monkeypatch.setattr(audit.snapshot, "CHUNK_ROWS", 7)
    write(store, 0, 7 * FAN_IN * 3 + 5)
    snap_dir = tmp_path / "snap"
    Publisher(store.con.cursor(), snap_dir, 0.1, grace_s=0).publish()
    expected = store.con.execute('SELECT "partition", "offset" FROM audit_log ORDER BY rowid').fetchall()
    assert rows(snap_dir) == expected
    manifest = Manifest.load(snap_dir)
    assert manifest is not None and [s.level for s in manifest.segments] == [1, 1, 1, 0]


def test_rows_the_sink_pokes_about_are_published_as_soon_as_the_interval_allows(
    store: DuckDBStore, tmp_path: Path
) -> None:
    """Poked after the interval: published at once (not an interval later); poked within it: at its end;
    never poked: still published, every second interval."""
    import time

    snap_dir, interval = tmp_path / "snap", 2.0
    publisher = Publisher(store.con.cursor(), snap_dir, interval, grace_s=0)

    def published_after(poke: bool) -> float:
        seen = Manifest.load(snap_dir)
        before, started = seen.version if seen else -1, time.monotonic()
        write(store, 1000 * before + 1000, 10)
        if poke:
            publisher.poke()
        while (m := Manifest.load(snap_dir)) is None or m.version == before:
            assert time.monotonic() - started < 3 * interval
            time.sleep(0.01)
        return time.monotonic() - started

    publisher.start()
    try:
        while Manifest.load(snap_dir) is None:  # the first publish, at start
            time.sleep(0.01)
        assert 0.5 * interval < published_after(poke=True) <= interval + 0.5  # within the interval: at its end
        time.sleep(interval)
        assert published_after(poke=True) < 0.5 * interval  # past it: at once
        time.sleep(interval)
        assert 0.5 * interval < published_after(poke=False)  # unpoked: only when the second interval ends
    finally:
        publisher.stop()
    assert rows(snap_dir) == store.con.execute('SELECT "partition", "offset" FROM audit_log ORDER BY rowid').fetchall()


def test_each_version_is_queried_over_its_own_files_through_the_migrations_views(
    store: DuckDBStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version's catalog is a copy of one built once per set of migrations, its file views replaced: the
    record views answer over that version's rows; other migrations get a catalog of their own."""
    snap_dir = tmp_path / "snap"
    publisher = Publisher(store.con.cursor(), snap_dir, 0.1, grace_s=3600)
    counts = []
    for k in range(3):
        write(store, 10 * k, 10)
        publisher.publish(publisher.changes())
        snap = open_snapshot(snap_dir)
        assert snap is not None
        counts.append(snap.con.execute("SELECT count(*), max(start_time) FROM findings").fetchall()[0])
    assert counts == [(10, 9), (20, 19), (30, 29)]
    assert len(list(snap_dir.glob(f"{SCHEMA_CATALOG}*"))) == 1
    extra = "CREATE VIEW newest_finding AS SELECT max(start_time) AS n FROM findings"
    monkeypatch.setattr(snapshot, "_migration_views", lambda: (*_migration_views(), extra))
    write(store, 30, 10)
    publisher.publish(publisher.changes())
    snap = open_snapshot(snap_dir)
    assert snap is not None and snap.con.execute("SELECT n FROM newest_finding").fetchall() == [(39,)]
    assert len(list(snap_dir.glob(f"{SCHEMA_CATALOG}*"))) == 2
