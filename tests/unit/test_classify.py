"""Record type and id from raw bytes: one definition for the store and for verify."""

from __future__ import annotations

import hashlib

import duckdb
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import native
from audit.classify import Classifier, classify_sql
from audit.records import RECORD_TYPES, AuditRecord
from tests.conftest import require_native


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
    (b'[1, "finding", "f-1", {}]', None),  # the fields by position: not a record
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


def worker_records() -> list[AuditRecord]:
    from streams.synthetic import envelope
    from streams.testing import run_messages
    from tests.unit.test_pipeline import DECISION

    bad = [{"kind": "step", "job": "x", "step": i, "start": 0.0, "duration": -1.0} for i in range(2)]
    out = run_messages([b"{oops", envelope(bad, "s")], decisions=[orjson.dumps(DECISION)])
    assert {r.type for r in out.audit} == {"dead_letter", "decision"}
    return out.audit


def test_every_record_the_worker_emits_keeps_its_own_type_and_id() -> None:
    records = worker_records()
    assert classify([r.encode() for r in records]) == [(r.type, r.id) for r in records]


@pytest.mark.usefixtures("chain_impl")
def test_the_sink_classifier_gives_the_same_classes_in_order() -> None:
    values = [value for value, _ in CASES] * 3 + LENIENT
    classifier = Classifier()
    types, ids = classifier.classify(pa.array(values, pa.binary()))
    classifier.close()
    assert list(zip(types.to_pylist(), ids.to_pylist(), strict=True)) == classify(values)


# --- the native fast path never answers differently from the SQL -----------------------------------------

FIELD_VALUES = {
    "v": ["1", "1.0", "1e0", '"1"', "true", "2", "-1", "null", "100000000000000000000", "01"],
    "type": [*(f'"{t}"' for t in RECORD_TYPES), '"gossip"', "5", "null", '"fin\\u0064ing"', '["finding"]', '""'],
    "id": ['"a"', '""', '"x\\ud800y"', '"\\ud83d\\ude00"', '"é"', "5", "null", '{"a": 1}', '"\\u00e9"', '"\\""'],
    "body": [
        "{}",
        '{"a": [1, 2.5e3, null]}',
        "[]",
        '"{"',
        "null",
        '" {}"',
        '{"n": 1e400}',
        '{"s": "\\ud800"}',
        '{"k": 1, "k": 2}',
        '{"a": NaN}',
        "{,}",
    ],
}
fields = st.lists(
    st.one_of(
        st.sampled_from(sorted(FIELD_VALUES)).flatmap(
            lambda k: st.tuples(st.just(k), st.sampled_from(FIELD_VALUES[k]))
        ),
        st.tuples(st.sampled_from(["source", "extra", "V", "Type"]), st.sampled_from(['{"t": 1}', "0", '"s"'])),
    ),
    max_size=7,
)
objects = st.builds(
    lambda pairs, space, trailing, tail, order: (
        "{"
        + ("," + space).join(f'"{k}"{space}:{space}{v}' for k, v in (pairs if order else pairs[::-1]))
        + ("," if trailing else "")
        + "}"
        + tail
    ).encode(),
    st.lists(
        st.sampled_from([("v", "1"), ("type", '"finding"'), ("id", '"f"'), ("body", "{}")]),
        min_size=4,
        max_size=4,
        unique=True,
    ).flatmap(lambda base: fields.map(lambda extra: base + extra)),
    st.sampled_from(["", " ", "\n\t"]),
    st.booleans(),
    st.sampled_from(["", " ", " x", "\x00"]),
    st.booleans(),
)
arrays = st.lists(st.sampled_from(["1", '"finding"', '"decision"', '"f-1"', '""', "{}", '{"a": 1}', "[]"]),
                  min_size=3, max_size=5).map(lambda items: ("[" + ", ".join(items) + "]").encode())  # fmt: skip
documents = st.one_of(objects, arrays)
corrupted = st.tuples(documents, st.integers(0, 400), st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\\"])).map(
    lambda d: d[0][: d[1]] + d[2] + d[0][d[1] :]
)


def fast_path_codes(values: pa.Array) -> bytes:
    """The native fast path's type code per value (255: left to the SQL)."""
    assert native.core is not None
    codes, _, _ = native.core.classify_values(native.binaries(values), len(values), list(RECORD_TYPES))
    return codes


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(documents, corrupted), min_size=1, max_size=40))
def test_the_fast_path_answers_only_where_the_sql_agrees(values: list[bytes]) -> None:
    require_native()
    array = pa.array(values, pa.binary())
    codes = fast_path_codes(array)
    fast = Classifier().classify(array)
    sql = classify(values)
    assert list(zip(fast[0].to_pylist(), fast[1].to_pylist(), strict=True)) == sql
    answered = [v for v, c in zip(values, codes, strict=True) if c != 255]
    assert all(classify([v])[0][0] != "invalid" for v in answered)  # (the fast path answers only records)


def test_the_fast_path_answers_every_well_formed_record() -> None:
    """So the sink's classification runs natively, not through the SQL, for what the worker writes."""
    require_native()
    values = [r.encode() for r in worker_records()] + [value for value, expected in CASES if expected]
    array = pa.array(values, pa.binary())
    assert 255 not in fast_path_codes(array)
