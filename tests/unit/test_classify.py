"""Record type and id from raw bytes: one definition for the store and for verify."""

from __future__ import annotations

import hashlib

import duckdb
import orjson
import pyarrow as pa
import pytest

from audit.classify import Classifier, classify_sql


def classify(values: list[bytes]) -> list[tuple[str, str]]:
    con = duckdb.connect()
    con.register("t", pa.table({"value": pa.array(values, pa.binary())}))
    rows = con.execute(f"SELECT record_type, record_id FROM ({classify_sql('t')})").fetchall()
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
    (doc(v=1, type="finding", id="x", body="{not an object"), None),  # a string that starts like one
    (doc(v=1, type="finding", id="x", body=" {}"), None),
    (doc(v=1, type="finding", id="x"), None),
    (b'{"v": 1, "type": "finding", "id": "x", "body": {"s": "\xff"}}', None),  # bad UTF-8 inside the body
]
# json_transform casts what it can: these records' fields are read as v 1 and id "5"
LENIENT = [doc(v="1", type="finding", id=5, body={}), doc(v=1.0, type="finding", id="a", body={})]


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_type_and_id(value: bytes, expected: tuple[str, str] | None) -> None:
    assert classify([value]) == [expected or invalid(value)]


def test_fields_are_read_as_json_transform_casts_them() -> None:
    assert classify(LENIENT) == [("finding", "5"), ("finding", "a")]


def test_every_record_the_worker_emits_keeps_its_own_type_and_id() -> None:
    from streams.synthetic import envelope
    from streams.testing import run_messages
    from tests.unit.test_pipeline import DECISION

    bad = [{"kind": "step", "job": "x", "step": i, "start": 0.0, "duration": -1.0} for i in range(2)]
    out = run_messages([b"{oops", envelope(bad, "s")], decisions=[orjson.dumps(DECISION)])
    assert {r.type for r in out.audit} == {"dead_letter", "decision"}
    assert classify([r.encode() for r in out.audit]) == [(r.type, r.id) for r in out.audit]


def test_the_sink_classifier_gives_the_same_classes_in_order() -> None:
    values = [value for value, _ in CASES] * 3 + LENIENT
    classifier = Classifier()
    types, ids = classifier.classify(pa.array(values, pa.binary()))
    classifier.close()
    assert list(zip(types.to_pylist(), ids.to_pylist(), strict=True)) == classify(values)
