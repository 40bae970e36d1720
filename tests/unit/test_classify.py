"""Record type and id from raw bytes: one definition for the store and for verify."""

from __future__ import annotations

import hashlib

import duckdb
import orjson
import pyarrow as pa
import pytest

from audit.classify import classify
from audit.records import RECORD_TYPES


def former_sql(source: str) -> str:
    """The SQL the store classified with before audit/classify.py (``source``'s columns plus record_type
    and record_id): records stored then must classify the same."""
    return f"""
    SELECT * EXCLUDE (c, ok), CASE WHEN ok THEN c.type ELSE 'invalid' END AS record_type,
           CASE WHEN ok THEN c.id ELSE left(sha256(value), 32) END AS record_id
    FROM (SELECT *, coalesce(c.v = 1 AND c.type IN {RECORD_TYPES!r} AND c.id IS NOT NULL
                             AND json_type(c.body) = 'OBJECT', false) AS ok
          FROM (SELECT *, try(json_transform(decode(value),
                              '{{"v": "INTEGER", "type": "VARCHAR", "id": "VARCHAR", "body": "JSON"}}')) AS c
                FROM {source}))
    """


def former(values: list[bytes]) -> list[tuple[str, str]]:
    con = duckdb.connect()
    con.register("t", pa.table({"value": pa.array(values, pa.binary())}))
    rows = con.execute(f"SELECT record_type, record_id FROM ({former_sql('t')})").fetchall()
    return [(str(t), str(i)) for t, i in rows]


def doc(**fields: object) -> bytes:
    return orjson.dumps(fields)


def invalid(value: bytes) -> tuple[str, str]:
    return ("invalid", hashlib.sha256(value).hexdigest()[:32])


GOOD = doc(v=1, type="finding", id="f-1", body={"kind": "straggler"}, source={"topic": "t"})
CASES = [
    (GOOD, ("finding", "f-1")),
    (doc(body={}, id="d", type="decision", v=1), ("decision", "d")),  # key order does not matter
    (b' {"v": 1, "type": "dead_letter", "id": "", "body": {"a": "\xc3\xa9"}} ', ("dead_letter", "")),
    (b"\xff\xfe not json", None),
    (b"", None),
    (b"[1, 2]", None),
    (GOOD + b" trailing", None),
    (doc(type="finding", id="x"), None),  # no version, no body
    (doc(v=2, type="finding", id="x", body={}), None),
    (doc(v=1, type="gossip", id="x", body={}), None),
    (doc(v=1, type="finding", id=None, body={}), None),
    (doc(v=1, type="finding", id="x", body=[1]), None),
    (doc(v=1, type="finding", id="x", body=None), None),
    (doc(v=1, type="finding", id="x"), None),
    (b'{"v": 1, "type": "finding", "id": "x", "body": {"s": "\xff"}}', None),  # bad UTF-8 inside the body
]


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_type_and_id(value: bytes, expected: tuple[str, str] | None) -> None:
    types, ids = classify([value])
    assert (types[0], ids[0]) == (expected or invalid(value))


def test_the_store_classifies_as_it_did_in_sql() -> None:
    from streams.synthetic import envelope
    from streams.testing import run_messages
    from tests.unit.test_pipeline import DECISION

    bad = [{"kind": "step", "job": "x", "step": i, "start": 0.0, "duration": -1.0} for i in range(2)]
    out = run_messages([b"{oops", envelope(bad, "s")], decisions=[orjson.dumps(DECISION)])
    values = [r.encode() for r in out.audit] + [value for value, _ in CASES]
    assert len(out.audit) >= 3
    assert list(zip(*classify(values), strict=True)) == former(values)
