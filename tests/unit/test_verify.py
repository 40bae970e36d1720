"""Tamper evidence: every kind of after-the-fact change is found and the first bad record, checkpoint or
schema object is named — with the anchors outside the host (a pinned key, the checkpoints topic, a witness
file) that a host owner cannot rewrite alone."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import orjson
import pytest

from audit.chain import link
from audit.checkpoint import Signer, append_line, fingerprint, load_public_key, public_key_path
from audit.duckdb_store import DuckDBStore
from audit.records import AuditRecord, SourcePosition
from audit.store import MemoryStore, RawRecord
from audit.verify import Report, verify
from audit.verify_anchors import Anchors
from streams.engine.findings import Finding
from streams.errors import StoreError


def record(i: int) -> bytes:
    f = Finding(
        "step_time_drift", (f"job:j{i % 3}",), float(i), float(i) + 1, 1.2, {"i": i}, {"extra_step_seconds": 1.0}
    )
    return AuditRecord("finding", f.id, SourcePosition("tele", 0, i), f.as_dict(), f"job:j{i % 3}").encode()


@dataclass
class Trail:
    """A store with 300 records on two partitions and signed checkpoints after the first 200 (seq 1) and
    after all (seq 2), each written where the sink writes it: the file, the witness, the topic (a list
    here: what the broker holds), the table. ``older`` holds copies of the DB and file as of seq 1."""

    db: Path
    file: Path
    key: Path
    witness: Path
    topic: list[bytes]
    older: tuple[Path, Path]
    anchors: Anchors = field(init=False)

    def __post_init__(self) -> None:
        pinned = fingerprint(load_public_key(public_key_path(self.key)))
        self.anchors = Anchors(fingerprint=pinned, topic=lambda: list(self.topic), witness=self.witness)

    def verify(self, **options: object) -> Report:
        anchors = options.pop("anchors", self.anchors)
        return verify(self.db, self.file, public_key_path(self.key), anchors=anchors, **options)  # type: ignore[arg-type]

    def sign(self, signer: Signer, seq: int, heads: dict[tuple[str, int], tuple[int, bytes]]) -> dict[str, str]:
        return signer.checkpoint(seq, heads)


def _checkpoint(trail_files: tuple[Path, Path, list[bytes]], store: DuckDBStore, signer: Signer, seq: int) -> None:
    file, witness, topic = trail_files
    line = signer.checkpoint(seq, store.heads())
    append_line(file, line)
    append_line(witness, line)
    topic.append(orjson.dumps(line))
    store.add_checkpoint(seq, line)


@pytest.fixture
def trail(tmp_path: Path, chain_impl: str) -> Trail:
    """(Written and verified with the native chain, and again with the Python one.)"""
    db, file, key = tmp_path / "a.duckdb", tmp_path / "a.ckpt.jsonl", tmp_path / "keys" / "k.pem"
    witness, topic = tmp_path / "elsewhere" / "witness.jsonl", []
    signer = Signer.load_or_create(key)
    store = DuckDBStore(db)
    store.write([RawRecord("audit", i % 2, i // 2, 1000 + i, b"k", record(i)) for i in range(200)])
    _checkpoint((file, witness, topic), store, signer, 1)
    store.close()
    older = (tmp_path / "old" / "a.duckdb", tmp_path / "old" / "a.ckpt.jsonl")
    older[0].parent.mkdir()
    shutil.copy(db, older[0])
    shutil.copy(file, older[1])
    store = DuckDBStore(db)
    store.write([RawRecord("audit", i % 2, i // 2, 1000 + i, None, record(i)) for i in range(200, 300)])
    _checkpoint((file, witness, topic), store, signer, 2)
    store.close()
    return Trail(db, file, key, witness, topic, older)


@pytest.fixture(
    params=[{}, {"range_rows": 16, "parallel_rows": 0}], ids=["one-pass", "16-row-ranges-in-worker-processes"]
)
def split(request: pytest.FixtureRequest) -> dict[str, int]:
    """How verify splits the per-row checks: every outcome must be the same either way."""
    return dict(request.param)


GUARDS = (
    ("audit_log_no_update", "UPDATE", "audit_log"), ("audit_log_no_delete", "DELETE", "audit_log"),
    ("checkpoints_no_update", "UPDATE", "checkpoints"), ("checkpoints_no_delete", "DELETE", "checkpoints"),
)  # fmt: skip


def tamper(db: Path, *statements: str) -> None:
    """Edit the file as its owner can: drop the guards, change things, put the guards back (a careful
    forger leaves them as they were)."""
    con = duckdb.connect(str(db))
    for name, _, table in GUARDS:
        con.execute(f"DROP TRIGGER {name} ON {table}")
    for s in statements:
        con.execute(s)
    for name, event, table in GUARDS:
        con.execute(
            f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH STATEMENT "
            f"INSERT INTO _append_only_guard SELECT error('{table} is append-only')"
        )
    con.close()


def change_value(p: int, o: int) -> str:
    return f"""UPDATE audit_log SET value = replace(value::VARCHAR, '1.2', '1.1')::BLOB
               WHERE "partition" = {p} AND "offset" = {o}"""


REWIND = (  # rewind sink_offsets to what audit_log still holds (the chain itself stays consistent)
    """CREATE TEMP TABLE h AS SELECT topic, "partition", max("offset") + 1 AS n,
       arg_max(chain_hash, "offset") AS head FROM audit_log GROUP BY ALL""",
    "DELETE FROM sink_offsets",
    "INSERT INTO sink_offsets SELECT * FROM h",
)


def keep_lines(path: Path, n: int) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in path.read_bytes().splitlines()[:n]))


def append_forged_record(t: Trail) -> None:
    """A record appended after the last checkpoint, chained correctly, offsets advanced."""
    con = duckdb.connect(str(t.db))
    head = bytes(con.execute('SELECT chain_head FROM sink_offsets WHERE "partition" = 0').fetchall()[0][0])
    forged = RawRecord("audit", 0, 150, 9999, None, record(9999))
    chained = link(head, forged)
    con.execute(
        'INSERT INTO audit_log (topic, "partition", "offset", kafka_ts_ms, key, value, record_type, record_id,'
        " chain_hash) VALUES ('audit', 0, 150, 9999, NULL, $v, 'finding', 'forged', $h)",
        {"v": forged.value, "h": chained},
    )
    con.execute('UPDATE sink_offsets SET next_offset = 151, chain_head = $h WHERE "partition" = 0', {"h": chained})
    con.close()


def resign_with_key(t: Trail, signer: Signer, heads_from_db: bool = False) -> None:
    """Rewrite the checkpoint file and table with ``signer`` (seqs kept)."""
    lines = [orjson.loads(line) for line in t.file.read_bytes().splitlines()]
    t.file.unlink()
    con = duckdb.connect(str(t.db))
    con.execute("DROP TRIGGER checkpoints_no_delete ON checkpoints")
    con.execute("DELETE FROM checkpoints")
    for doc in lines:
        payload = orjson.loads(doc["payload"])
        heads = {(h["topic"], h["partition"]): (h["next_offset"], bytes.fromhex(h["head"])) for h in payload["heads"]}
        if heads_from_db:
            heads = {(tp, p): (n, bytes(h)) for tp, p, n, h in con.execute("SELECT * FROM sink_offsets").fetchall()}
        line = signer.checkpoint(payload["seq"], heads)
        append_line(t.file, line)
        con.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)",
                    [payload["seq"], line["payload"], line["signature"], line["key_id"]])  # fmt: skip
    con.close()


def sign_new_checkpoint(t: Trail, seq: int) -> None:
    """With the host's own private key: sign the stored heads as checkpoint ``seq`` into the file and table."""
    signer = Signer.load_or_create(t.key)
    con = duckdb.connect(str(t.db), read_only=True)
    heads = {(tp, p): (n, bytes(h)) for tp, p, n, h in con.execute("SELECT * FROM sink_offsets").fetchall()}
    con.close()
    line = signer.checkpoint(seq, heads)
    append_line(t.file, line)
    store_con = duckdb.connect(str(t.db))
    store_con.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)",
                      [seq, line["payload"], line["signature"], line["key_id"]])  # fmt: skip
    store_con.close()


def restore_older_copy(t: Trail) -> None:
    shutil.copy(t.older[0], t.db)
    shutil.copy(t.older[1], t.file)


def alter_file_line(t: Trail, n: int) -> None:
    lines = t.file.read_bytes().splitlines()
    doc = orjson.loads(lines[n - 1])
    doc["payload"] = doc["payload"].replace('"next_offset":150', '"next_offset":149')
    lines[n - 1] = orjson.dumps(doc)
    t.file.write_bytes(b"".join(line + b"\n" for line in lines))


def replace_key(t: Trail) -> Signer:
    other = Signer.load_or_create(t.key.parent / "other.pem")
    shutil.copy(public_key_path(t.key.parent / "other.pem"), public_key_path(t.key))
    return other


@dataclass(frozen=True)
class Tampering:
    name: str
    apply: Callable[[Trail], None]
    expect: str  # the (first matching) problem names this
    anchors: Callable[[Trail], Anchors] | None = None  # how verify is run (default: the trail's anchors)


TAMPERINGS = [
    # direct edits of audit_log: the first record that breaks its chain is named
    Tampering(
        "changed value",
        lambda t: tamper(t.db, change_value(1, 40)),
        "audit_log record audit/1@40 does not match its hash chain",
    ),
    Tampering(
        "changed key",
        lambda t: tamper(t.db, 'UPDATE audit_log SET key = \'x\' WHERE "partition" = 0 AND "offset" = 5'),
        "audit_log record audit/0@5 does not match",
    ),
    Tampering(
        "changed Kafka timestamp",
        lambda t: tamper(t.db, 'UPDATE audit_log SET kafka_ts_ms = 1 WHERE "partition" = 0 AND "offset" = 6'),
        "audit_log record audit/0@6 does not match",
    ),
    Tampering(
        "renumbered offset",
        lambda t: tamper(t.db, 'UPDATE audit_log SET "offset" = 1007 WHERE "partition" = 0 AND "offset" = 7'),
        "audit_log record audit/0@8 does not match",
    ),
    Tampering(
        "deleted middle record",
        lambda t: tamper(t.db, 'DELETE FROM audit_log WHERE "partition" = 0 AND "offset" = 10'),
        "audit_log record audit/0@11 does not match",
    ),
    Tampering(
        "inserted duplicate record",
        lambda t: tamper(t.db, 'INSERT INTO audit_log SELECT * FROM audit_log WHERE "partition" = 0 AND "offset" = 20'),
        "audit_log record audit/0@20 does not match",
    ),
    Tampering(
        "swapped two records' values",
        lambda t: tamper(
            t.db,
            """UPDATE audit_log SET value = (SELECT value FROM audit_log WHERE "partition" = 0 AND "offset" = 31)
                 WHERE "partition" = 0 AND "offset" = 30""",
        ),
        "audit_log record audit/0@30 does not match",
    ),
    Tampering(
        "overwritten chain hash",
        lambda t: tamper(
            t.db, 'UPDATE audit_log SET chain_hash = sha256(\'x\')::BLOB WHERE "partition" = 1 AND "offset" = 60'
        ),
        "audit_log record audit/1@60 does not match",
    ),
    Tampering(
        "changed record type",
        lambda t: tamper(t.db, 'UPDATE audit_log SET record_type = \'invalid\' WHERE "partition" = 0 AND "offset" = 3'),
        "audit_log record audit/0@3: stored type or id differ from its bytes",
    ),
    Tampering(
        "changed record id",
        lambda t: tamper(t.db, 'UPDATE audit_log SET record_id = \'other\' WHERE "partition" = 0 AND "offset" = 4'),
        "audit_log record audit/0@4: stored type or id differ from its bytes",
    ),
    Tampering(
        "record moved to another partition",
        lambda t: tamper(t.db, 'UPDATE audit_log SET "partition" = 1 WHERE "partition" = 0 AND "offset" = 140'),
        "audit_log record audit/0@141 does not match",
    ),
    # dropping what a checkpoint covers
    Tampering(
        "newest rows deleted, offsets rewound",
        lambda t: tamper(t.db, 'DELETE FROM audit_log WHERE "offset" >= 120', *REWIND),
        "checkpoint 2: audit/0 offset 149 is signed but missing from audit_log (truncated)",
    ),
    Tampering(
        "newest rows deleted, offsets rewound, checkpoint lines trimmed",
        lambda t: (
            tamper(
                t.db, 'DELETE FROM audit_log WHERE "offset" >= 120', *REWIND, "DELETE FROM checkpoints WHERE seq = 2"
            ),
            keep_lines(t.file, 1),
        ),
        "lacks checkpoint 2 that the witness",
    ),
    Tampering(
        "the same, with only the topic outside the host",
        lambda t: (
            tamper(
                t.db, 'DELETE FROM audit_log WHERE "offset" >= 120', *REWIND, "DELETE FROM checkpoints WHERE seq = 2"
            ),
            keep_lines(t.file, 1),
        ),
        "lacks checkpoint 2 that the checkpoints topic holds",
        lambda t: replace(t.anchors, witness=None),
    ),
    Tampering(
        "a whole partition dropped",
        lambda t: tamper(
            t.db, 'DELETE FROM audit_log WHERE "partition" = 1', 'DELETE FROM sink_offsets WHERE "partition" = 1'
        ),
        "checkpoint 1: audit/1 offset 99 is signed but missing from audit_log (truncated)",
    ),
    Tampering(
        "checkpoint file emptied", lambda t: t.file.write_bytes(b""), "lacks checkpoint 1 (and 1 more) that the witness"
    ),
    Tampering(
        "checkpoint file and table emptied, nothing outside the host",
        lambda t: (t.file.write_bytes(b""), tamper(t.db, "DELETE FROM checkpoints")),
        "no signed checkpoint in any copy",
        lambda t: Anchors(fingerprint=t.anchors.fingerprint),
    ),
    Tampering("checkpoint file deleted", lambda t: t.file.unlink(), "does not exist"),
    # appending after the newest checkpoint
    Tampering(
        "forged record appended after the last checkpoint",
        append_forged_record,
        "audit_log records audit/0@150..150 come after the newest signed checkpoint (2)",
    ),
    Tampering(
        "forged record appended and signed with the host's own key",
        lambda t: (append_forged_record(t), sign_new_checkpoint(t, 3)),
        "the newest checkpoint (3) is not on the witness",
    ),
    Tampering(
        "store truncated and re-signed with the host's own key",
        lambda t: (
            tamper(t.db, 'DELETE FROM audit_log WHERE "offset" >= 120', *REWIND, "DELETE FROM checkpoints"),
            resign_with_key(t, Signer.load_or_create(t.key), heads_from_db=True),
        ),
        "checkpoint 2 differs between copies",
    ),
    Tampering(
        "DB and checkpoint file restored from an older copy", restore_older_copy, "lacks checkpoint 2 that the witness"
    ),
    # keys
    Tampering(
        "checkpoints re-signed with a new key, .pub replaced",
        lambda t: resign_with_key(t, replace_key(t)),
        "is not the pinned one",
    ),
    Tampering(
        "checkpoints re-signed with a new key, .pub replaced, no pin",
        lambda t: resign_with_key(t, replace_key(t)),
        "no pinned checkpoint key",
        lambda t: replace(t.anchors, fingerprint=""),
    ),
    Tampering(
        "forged checkpoint line appended (another key)",
        lambda t: append_line(
            t.file, Signer.load_or_create(t.key.parent / "o.pem").checkpoint(3, {("audit", 0): (1, b"\0" * 32)})
        ),
        "a.ckpt.jsonl:3: signature does not match the pinned key",
    ),
    Tampering(
        "checkpoint line's payload altered",
        lambda t: alter_file_line(t, 2),
        "a.ckpt.jsonl:2: signature does not match the pinned key",
    ),
    Tampering(
        "checkpoints table row altered",
        lambda t: tamper(
            t.db, "UPDATE checkpoints SET payload = replace(payload, '\"seq\":1', '\"seq\":7') WHERE seq = 1"
        ),
        "checkpoints table:1: signature does not match",
    ),
    Tampering(
        "witness trimmed", lambda t: keep_lines(t.witness, 1), "lacks checkpoint 2 that the checkpoints topic holds"
    ),
    # offsets
    Tampering(
        "sink_offsets rewound",
        lambda t: tamper(t.db, 'UPDATE sink_offsets SET next_offset = 10 WHERE "partition" = 0'),
        "sink_offsets for audit/0 do not match audit_log",
    ),
    Tampering(
        "sink_offsets head changed",
        lambda t: tamper(t.db, "UPDATE sink_offsets SET chain_head = sha256('x')::BLOB WHERE \"partition\" = 1"),
        "sink_offsets for audit/1 do not match audit_log",
    ),
    # schema objects the views and the sink depend on
    Tampering(
        "macro named like a built-in the views call",
        lambda t: tamper(t.db, "CREATE MACRO json_transform(j, s) AS json_transform(j::JSON, s)"),
        "macro or function main.json_transform/macro is not one the migrations define (added)",
    ),
    Tampering(
        "redefined view",
        lambda t: tamper(t.db, "CREATE OR REPLACE VIEW findings AS SELECT * FROM audit_log WHERE false"),
        "view findings is not the one the migrations define (altered)",
    ),
    Tampering("dropped view", lambda t: tamper(t.db, "DROP VIEW decisions"), "view decisions is missing (dropped)"),
    Tampering(
        "added view",
        lambda t: tamper(t.db, "CREATE VIEW extra AS SELECT 1"),
        "view extra is not one the migrations define (added)",
    ),
    Tampering(
        "added table macro",
        lambda t: tamper(t.db, "CREATE MACRO everything() AS TABLE SELECT * FROM audit_log"),
        "macro or function main.everything/table_macro is not one the migrations define (added)",
    ),
    Tampering(
        "dropped append-only trigger",
        lambda t: (
            tamper(t.db),
            duckdb.connect(str(t.db)).execute("DROP TRIGGER audit_log_no_update ON audit_log").close(),
        ),
        "trigger audit_log_no_update is missing (dropped)",
    ),
    Tampering(
        "schema_migrations row deleted",
        lambda t: tamper(t.db, "DELETE FROM schema_migrations WHERE version = 4"),
        "schema_migrations lacks 0004_graph_changes",
    ),
]


@pytest.mark.parametrize("kind", TAMPERINGS, ids=[k.name for k in TAMPERINGS])
def test_every_tampering_kind_is_detected_and_named(trail: Trail, kind: Tampering) -> None:
    assert trail.verify().problems == []
    kind.apply(trail)
    anchors = kind.anchors(trail) if kind.anchors else trail.anchors
    problems = trail.verify(anchors=anchors).problems
    assert any(kind.expect in p for p in problems), problems


def test_an_untouched_trail_verifies(trail: Trail, split: dict[str, int]) -> None:
    report = trail.verify(**split)
    assert report.problems == []
    assert (report.records, report.partitions, report.checkpoints) == (300, 2, 2)


def test_the_first_problem_names_the_first_changed_record(trail: Trail, split: dict[str, int]) -> None:
    tamper(trail.db, change_value(1, 40))
    assert trail.verify(**split).problems[0].startswith("audit_log record audit/1@40 does not match its hash chain")


def test_an_unreachable_topic_is_said_and_fails(trail: Trail) -> None:
    def unreachable() -> list[bytes]:
        raise StoreError("no broker at 127.0.0.1:1")

    problems = trail.verify(anchors=replace(trail.anchors, topic=unreachable)).problems
    assert problems == [
        "cannot read the checkpoints topic (no broker at 127.0.0.1:1): the chain heads were not compared with it; "
        "pass --offline to check only this host's copies"
    ]


def test_offline_is_said_but_passes(trail: Trail) -> None:
    report = trail.verify(anchors=replace(trail.anchors, topic=None))
    assert report.ok and report.notes == ["not compared with the checkpoints topic (offline): only this host's copies"]


def test_a_pinned_public_key_file_is_used_instead_of_the_one_beside(trail: Trail, tmp_path: Path) -> None:
    pinned = tmp_path / "pinned.pub"
    shutil.copy(public_key_path(trail.key), pinned)
    resign_with_key(trail, replace_key(trail))
    problems = trail.verify(anchors=Anchors(public_key=pinned, topic=lambda: list(trail.topic))).problems
    assert problems and all("signature does not match the pinned key" in p for p in problems[:2]), problems


def test_guards_refuse_update_and_delete(trail: Trail) -> None:
    con = duckdb.connect(str(trail.db))
    guarded = ("UPDATE audit_log SET key = NULL", "DELETE FROM audit_log", "DELETE FROM checkpoints")
    for statement in guarded:
        with pytest.raises(duckdb.Error, match="append-only"):
            con.execute(statement)
    with pytest.raises(duckdb.Error):  # the record tables are views over audit_log
        con.execute("DELETE FROM findings")
    con.close()
    assert trail.verify().ok


def test_a_shadowing_macro_changes_what_the_file_shows_but_not_what_verify_reads(trail: Trail) -> None:
    """The attack the catalog check is for: the macro hides every finding from the view ..."""
    hide = "CREATE MACRO json_transform(j, s) AS system.main.json_transform(CASE WHEN false THEN j END, s)"
    tamper(trail.db, hide)
    con = duckdb.connect(str(trail.db), read_only=True)
    assert con.execute("SELECT count(id) FROM findings").fetchall() == [(0,)]  # 300 before
    con.close()
    report = trail.verify()  # ... while verify itself still classifies every record (no class mismatch)
    assert report.records == 300
    assert not any("stored type or id" in p for p in report.problems)
    assert any("json_transform" in p for p in report.problems)


def test_memory_store_chains_like_the_duckdb_store(tmp_path: Path) -> None:
    batch = [RawRecord("audit", 0, i, 5, b"k", record(i)) for i in range(20)]
    mem, db = MemoryStore(), DuckDBStore(tmp_path / "m.duckdb")
    for store in (mem, db):
        store.write(batch[:12])
        store.write(batch[8:])  # overlapping re-delivery
    assert mem.heads() == db.heads() and len(mem.records) == 20
    assert db.con.execute("SELECT count(*) FROM audit_log").fetchall() == [(20,)]


def test_of_several_changes_the_first_in_partition_and_offset_order_is_named(
    trail: Trail, split: dict[str, int]
) -> None:
    changed = [(1, 3), (0, 70), (0, 15)]  # 15 ends a 16-row range; 70 sits inside a later one
    tamper(trail.db, *(change_value(p, o) for p, o in changed))
    problems = trail.verify(**split).problems
    assert problems[0].startswith("audit_log record audit/0@15 does not match its hash chain")
