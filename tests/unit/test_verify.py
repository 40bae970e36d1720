"""Tamper evidence: every kind of after-the-fact change is found and the first bad record is named."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from audit.checkpoint import Signer, append_line, public_key_path
from audit.duckdb_store import DuckDBStore
from audit.records import AuditRecord, SourcePosition
from audit.store import MemoryStore, RawRecord
from audit.verify import verify
from streams.engine.findings import Finding


def record(i: int) -> bytes:
    f = Finding(
        "step_time_drift", (f"job:j{i % 3}",), float(i), float(i) + 1, 1.2, {"i": i}, {"extra_step_seconds": 1.0}
    )
    return AuditRecord("finding", f.id, SourcePosition("tele", 0, i), f.as_dict(), f"job:j{i % 3}").encode()


@pytest.fixture(
    params=[{}, {"range_rows": 16, "parallel_rows": 0}], ids=["one-pass", "16-row-ranges-in-worker-processes"]
)
def split(request: pytest.FixtureRequest) -> dict[str, int]:
    """How verify splits the per-row checks: every outcome must be the same either way."""
    return dict(request.param)


@pytest.fixture
def trail(tmp_path: Path, chain_impl: str) -> tuple[Path, Path, Path]:
    """A store with 300 records on two partitions and a signed checkpoint after the first 200 (written and
    verified with the native chain, and again with the Python one)."""
    db, ckpt, key = tmp_path / "a.duckdb", tmp_path / "a.ckpt.jsonl", tmp_path / "keys" / "k.pem"
    signer = Signer.load_or_create(key)
    store = DuckDBStore(db)
    store.write([RawRecord("audit", i % 2, i // 2, 1000 + i, b"k", record(i)) for i in range(200)])
    append_line(ckpt, signer.checkpoint(1, store.heads()))
    store.write([RawRecord("audit", i % 2, i // 2, 1000 + i, None, record(i)) for i in range(200, 300)])
    append_line(ckpt, signer.checkpoint(2, store.heads()))
    store.close()
    return db, ckpt, public_key_path(key)


def tamper(db: Path, *statements: str) -> None:
    con = duckdb.connect(str(db))
    con.execute("DROP TRIGGER audit_log_no_update ON audit_log")
    con.execute("DROP TRIGGER audit_log_no_delete ON audit_log")
    for s in statements:
        con.execute(s)
    con.close()


def test_an_untouched_trail_verifies(trail: tuple[Path, Path, Path], split: dict[str, int]) -> None:
    report = verify(*trail, **split)
    assert report.problems == []
    assert (report.records, report.partitions, report.checkpoints) == (300, 2, 2)


def test_guards_refuse_update_and_delete(trail: tuple[Path, Path, Path], split: dict[str, int]) -> None:
    con = duckdb.connect(str(trail[0]))
    guarded = ("UPDATE audit_log SET key = NULL", "DELETE FROM audit_log", "DELETE FROM checkpoints")
    for statement in guarded:
        with pytest.raises(duckdb.Error, match="append-only"):
            con.execute(statement)
    with pytest.raises(duckdb.Error):  # the record tables are views over audit_log
        con.execute("DELETE FROM findings")
    con.close()
    assert verify(*trail, **split).ok


def test_a_changed_value_is_named(trail: tuple[Path, Path, Path], split: dict[str, int]) -> None:
    tamper(
        trail[0],
        """UPDATE audit_log SET value = replace(value::VARCHAR, '1.2', '1.1')::BLOB
                        WHERE "partition" = 1 AND "offset" = 40""",
    )
    problems = verify(*trail, **split).problems
    assert problems[0].startswith("audit_log record audit/1@40 does not match its hash chain")


def test_a_deleted_middle_record_is_named_by_its_successor(
    trail: tuple[Path, Path, Path], split: dict[str, int]
) -> None:
    tamper(trail[0], 'DELETE FROM audit_log WHERE "partition" = 0 AND "offset" = 10')
    assert verify(*trail, **split).problems[0].startswith("audit_log record audit/0@11 does not match")


def test_dropping_the_tail_is_caught_by_the_signed_checkpoint(
    trail: tuple[Path, Path, Path], split: dict[str, int]
) -> None:
    db = trail[0]
    tamper(
        db,
        'DELETE FROM audit_log WHERE "offset" >= 120',
        "DROP TRIGGER checkpoints_no_delete ON checkpoints",
        # a careful forger also rewinds the offsets and heads to the truncated chain
        """CREATE TEMP TABLE h AS SELECT topic, "partition", max("offset") + 1 AS n,
               arg_max(chain_hash, "offset") AS head FROM audit_log GROUP BY ALL""",
        'DELETE FROM sink_offsets', 'INSERT INTO sink_offsets SELECT * FROM h',
    )  # fmt: skip
    problems = verify(*trail, **split).problems
    assert any("signed but missing from audit_log (truncated)" in p for p in problems), problems
    assert not any(p.startswith("audit_log record") for p in problems)  # the chain itself is consistent


def test_a_redefined_view_is_named(trail: tuple[Path, Path, Path], split: dict[str, int]) -> None:
    tamper(trail[0], "CREATE OR REPLACE VIEW findings AS SELECT * FROM audit_log WHERE false")
    assert verify(*trail, **split).problems == [
        "view findings is not the one the migrations define (altered, added or dropped)"
    ]


def test_a_changed_record_type_is_named(trail: tuple[Path, Path, Path], split: dict[str, int]) -> None:
    tamper(trail[0], """UPDATE audit_log SET record_type = 'invalid' WHERE "partition" = 0 AND "offset" = 3""")
    assert verify(*trail, **split).problems[0] == "audit_log record 0@3: stored type or id differ from its bytes"


def test_a_forged_checkpoint_is_refused(trail: tuple[Path, Path, Path], split: dict[str, int]) -> None:
    _, ckpt, _ = trail
    other = Signer.load_or_create(ckpt.parent / "other.pem")
    append_line(ckpt, other.checkpoint(3, {("audit", 0): (1, b"\0" * 32)}))
    problems = verify(*trail, **split).problems
    assert problems == [f"{ckpt}:3: signature does not match (forged or altered checkpoint)"]


def test_memory_store_chains_like_the_duckdb_store(tmp_path: Path) -> None:
    batch = [RawRecord("audit", 0, i, 5, b"k", record(i)) for i in range(20)]
    mem, db = MemoryStore(), DuckDBStore(tmp_path / "m.duckdb")
    for store in (mem, db):
        store.write(batch[:12])
        store.write(batch[8:])  # overlapping re-delivery
    assert mem.heads() == db.heads() and len(mem.records) == 20
    assert db.con.execute("SELECT count(*) FROM audit_log").fetchone() == (20,)


def test_of_several_changes_the_first_in_partition_and_offset_order_is_named(
    trail: tuple[Path, Path, Path], split: dict[str, int]
) -> None:
    changed = [(1, 3), (0, 70), (0, 15)]  # 15 ends a 16-row range; 70 sits inside a later one
    tamper(
        trail[0],
        *(
            f"""UPDATE audit_log SET value = replace(value::VARCHAR, '1.2', '1.1')::BLOB
              WHERE "partition" = {p} AND "offset" = {o}"""
            for p, o in changed
        ),
    )
    problems = verify(*trail, **split).problems
    assert problems[0].startswith("audit_log record audit/0@15 does not match its hash chain")
