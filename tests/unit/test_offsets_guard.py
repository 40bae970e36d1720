"""Never skip silently: stored offsets the audit topic cannot continue are refused, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.duckdb_store import DuckDBStore
from audit.offsets_guard import check, compare_last
from audit.store import MemoryStore, RawRecord

TP = ("audit", 0)


def test_offsets_within_the_topic_pass() -> None:
    assert check({TP: 50}, {TP: 0}, {TP: 50}) is None
    assert check({TP: 10}, {TP: 10}, {TP: 75}) is None
    assert check({}, {TP: 0}, {TP: 75}) is None  # nothing stored: read from the beginning


def test_stored_offsets_beyond_the_end_are_refused() -> None:
    mismatch = check({TP: 75, ("audit", 1): 3}, {TP: 0}, {TP: 3, ("audit", 1): 3})
    assert mismatch is not None
    assert "audit/0 stored next offset 75 > topic end 3" in str(mismatch) and "README" in str(mismatch)
    assert "audit/1" not in str(mismatch)


def test_records_deleted_before_they_were_stored_are_refused() -> None:
    mismatch = check({TP: 5}, {TP: 20}, {TP: 40})
    assert mismatch is not None and "records 5..19 were deleted before they were stored" in str(mismatch)


def test_the_last_stored_record_must_still_be_there() -> None:
    mine = RawRecord("audit", 0, 49, 1000, b"k", b"v")
    assert compare_last({TP: mine}, {TP: mine._replace()}) is None
    assert compare_last({TP: mine}, {}) is None  # not checked
    for theirs in (mine._replace(timestamp_ms=2000), mine._replace(value=b"w"), None):
        mismatch = compare_last({TP: mine}, {TP: theirs})
        assert mismatch is not None and "audit/0 offset 49" in str(mismatch)


@pytest.mark.parametrize("kind", ["duckdb", "memory"])
def test_stores_give_their_last_record_per_partition(kind: str, tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "a.duckdb") if kind == "duckdb" else MemoryStore()
    store.write([RawRecord("audit", p, o, 1000 + o, b"k", b"v%d" % o) for o in range(4) for p in (0, 1)])
    assert store.last_records() == {
        ("audit", 0): RawRecord("audit", 0, 3, 1003, b"k", b"v3"),
        ("audit", 1): RawRecord("audit", 1, 3, 1003, b"k", b"v3"),
    }
    store.close()
