"""Property tests of the contract decoders, driven by the generator in ``bench/fuzz_decoder.py``.

- decode_telemetry never raises, and accounts for every sample of a message exactly once;
- row-wise samples are accepted exactly when the JSON Schema reference (jsonschema, Draft 2020-12) accepts them,
  and an accepted sample's values come out unchanged (defaults filled in); the values on and just beyond every
  bound of every field are checked systematically too, row-wise and columnar, on both paths;
- the msgspec fast path gives the same result as the precise path whenever it answers;
- decode_decision never raises, and agrees with the JSON Schema of decisions.

Hypothesis draws the generator's seed (derandomized, so CI runs the same examples every time); a failure
prints the message bytes. ``python bench/fuzz_decoder.py`` runs the same generator over 100k messages.

The bugs this suite found are kept as regression tests at the end. While a newly found bug is open, pin it with
a strict xfail test and keep the generator away from it through ``KNOWN_BUGS_OFF`` in ``bench/fuzz_decoder.py``.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from bench.fuzz_decoder import (
    DECISION,
    DEFS,
    DIFFERENTIAL,
    FAST,
    FUZZ,
    KINDS,
    KNOWN_BUGS_OFF,
    TELEMETRY,
    Gen,
    Knobs,
    accounting_violations,
    edge_values,
)
from streams.contract import envelope
from streams.contract.decision import decode_decision
from streams.contract.envelope import Decoded, decode_telemetry
from streams.contract.fast import decode_fast
from streams.contract.schema import decision_rules

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
TELEMETRY_ID, DECISION_ID = TELEMETRY["properties"]["schema"]["const"], DECISION["properties"]["schema"]["const"]


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def gen(seed: int, knobs: Knobs) -> Gen:
    return Gen(random.Random(seed), replace(knobs, **KNOWN_BUGS_OFF))


def shown(raw: bytes) -> str:
    return repr(raw if len(raw) <= 2000 else raw[:2000] + b"...")


def precise(raw: bytes) -> Decoded:
    """decode_telemetry with the fast paths (msgspec and native) switched off."""
    with (
        mock.patch.object(envelope, "decode_fast", lambda raw: None),
        mock.patch.object(envelope, "decode_native", lambda raw: None),
    ):
        return decode_telemetry(raw)


def assert_same(got: Decoded, want: Decoded, raw: bytes) -> None:
    where = shown(raw)
    assert (got.source, got.seq, got.total) == (want.source, want.seq, want.total), where
    assert got.rejects == want.rejects, where
    assert [(b.kind, b.index.tolist()) for b in got.batches] == [(b.kind, b.index.tolist()) for b in want.batches]
    for a, b in zip(got.batches, want.batches, strict=True):
        assert a.index.dtype == b.index.dtype, where
        assert list(a.columns) == list(b.columns), where
        for name, column in a.columns.items():
            other = b.columns[name]
            assert column.dtype == other.dtype, (a.kind, name, where)
            if column.dtype == object:
                values = column.tolist()
                assert values == other.tolist(), (a.kind, name, where)
                assert [type(v) for v in values] == [type(v) for v in other.tolist()], (a.kind, name, where)
            else:  # bit for bit: -0.0 and 0.0 differ
                assert column.tobytes() == other.tobytes(), (a.kind, name, column, other, where)


# ---- the reference ----------------------------------------------------------------------------------------

Draft202012Validator.check_schema(TELEMETRY)
Draft202012Validator.check_schema(DECISION)
SAMPLE_OF_KIND = {k: Draft202012Validator({"$defs": DEFS, "$ref": f"#/$defs/{k}"}) for k in KINDS}
ANY_SAMPLE = Draft202012Validator({"$defs": DEFS, **TELEMETRY["properties"]["samples"]["items"]})
DECISION_REFERENCE = Draft202012Validator(DECISION)


def reference_accepts(sample: Any) -> bool:
    kind = sample.get("kind") if type(sample) is dict else None
    if type(kind) is str and kind in SAMPLE_OF_KIND:
        return SAMPLE_OF_KIND[kind].is_valid(sample)
    return ANY_SAMPLE.is_valid(sample)  # no kind, an unknown one, or not an object: refused


def as_stored(sample: Any) -> Any:
    """The sample with every integer of a ``number`` field as the float64 the decoder stores and checks.

    Known, intended difference: the decoder converts a ``number`` field to float64 first and checks bounds on
    that, JSON Schema checks the exact integer. They differ only for an integer beyond 2**53 within one
    rounding step of a bound: metric value 1000000000000000001 > 1e18 is refused by the reference, and
    accepted as 1e18 by the decoder. The reference is asked about the float64 value instead.
    """
    kind = sample.get("kind") if type(sample) is dict else None
    if type(kind) is not str or kind not in DEFS:
        return sample
    props = DEFS[kind]["properties"]
    return {
        k: float(v) if props.get(k, {}).get("type") == "number" and type(v) is int and 2**53 < abs(v) < 2**1000 else v
        for k, v in sample.items()
    }


def expected_row(kind: str, sample: dict[str, Any]) -> dict[str, Any]:
    """What an accepted sample looks like in its batch: defaults filled, numbers as floats, integers as ints."""
    row = {}
    for name, spec in DEFS[kind]["properties"].items():
        if name == "kind":
            continue
        value = sample.get(name, spec.get("default"))
        row[name] = {"number": float, "integer": int}.get(spec.get("type", ""), lambda v: v)(value)
    return row


def test_reference_validator_counts_types_like_the_contract() -> None:
    """jsonschema's Draft 2020-12 type checker: a bool is neither an integer nor a number (as in the decoder),
    and 3.0 is an integer (the decoder agrees for samples)."""
    integer, number = Draft202012Validator({"type": "integer"}), Draft202012Validator({"type": "number"})
    assert not integer.is_valid(True) and not number.is_valid(False)
    assert integer.is_valid(3.0) and not integer.is_valid(3.5)
    step = {"kind": "step", "job": "j", "step": 3, "start": 1.0, "duration": 1.0}
    assert reference_accepts(step) and reference_accepts({**step, "step": 3.0})
    assert not reference_accepts({**step, "step": True}) and not reference_accepts({**step, "kind": "nope"})
    assert not reference_accepts([step]) and not reference_accepts({k: v for k, v in step.items() if k != "kind"})


# ---- 1a: never raises, every sample accounted for -----------------------------------------------------------


@fuzz_settings(1500)
@given(seed=SEEDS)
def test_decode_telemetry_never_raises_and_accounts_for_every_sample(seed: int) -> None:
    msg = gen(seed, FUZZ).message()
    decoded = decode_telemetry(msg.raw)  # an exception fails the test
    assert accounting_violations(decoded) == [], shown(msg.raw)
    if msg.intact:  # a valid envelope: no whole-message reject, and it holds the samples put in
        assert all(r.index is not None for r in decoded.rejects), (decoded.rejects[:3], shown(msg.raw))
        assert decoded.total == msg.samples, shown(msg.raw)


@fuzz_settings(200)
@given(seed=SEEDS)
def test_valid_messages_are_accepted_whole(seed: int) -> None:
    msg = gen(seed, replace(FUZZ, mutate=0.0, envelope=0.0, corrupt=0.0)).message()
    assume(msg.intact)  # not when a string got a lone surrogate (not Unicode text: refused)
    decoded = decode_telemetry(msg.raw)
    assert decoded.rejects == [], (decoded.rejects[:3], shown(msg.raw))
    assert decoded.count() == decoded.total == msg.samples, shown(msg.raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"null",
        b'{"schema": "driftlog.telemetry/1", "source": "t", "samples": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
        b'{"schema": "driftlog.telemetry/1", "source": "t", "samples": [{"kind": "op", "rank": ' + b"9" * 5000 + b"}]}",
        b'{"schema": "driftlog.telemetry/1", "source": "t", "columns": [{"kind": "op", "n": 200000, "data": 1}]}',
        b'{"schema": "driftlog.telemetry/1", "source": "t", "samples": [{"kind": {"a": 1}}, {"kind": ["op"]}]}',
        b'{"schema": "driftlog.telemetry/1", "source": "t", "samples": [{"kind": "metric", "value": -1e999}]}',
    ],
)
def test_edge_messages_never_raise(raw: bytes) -> None:
    assert accounting_violations(decode_telemetry(raw)) == []


# ---- 1b: row-wise samples against the JSON Schema reference --------------------------------------------------


@fuzz_settings(600)
@given(seed=SEEDS)
def test_rowwise_samples_agree_with_the_json_schema(seed: int) -> None:
    msg = gen(seed, DIFFERENTIAL).message()
    assume(msg.strict and msg.intact)  # strict JSON only (no NaN/Infinity, no lone surrogate)
    samples = json.loads(msg.raw)["samples"]  # what the decoder reads (duplicate keys: the last one counts)
    decoded = decode_telemetry(msg.raw)
    assert decoded.total == len(samples)
    rows = {
        int(i): (batch.kind, row) for batch in decoded.batches for i, row in zip(batch.index, batch.rows(), strict=True)
    }
    rejected = {r.index: r for r in decoded.rejects}
    for i, sample in enumerate(samples):
        where = (i, sample, rejected.get(i), shown(msg.raw))
        if reference_accepts(as_stored(sample)):
            assert i in rows, where
            kind, row = rows[i]
            assert kind == sample["kind"], where
            assert row == expected_row(kind, sample), where
            assert [type(v) for v in row.values()] == [type(v) for v in expected_row(kind, sample).values()], where
        else:
            assert i in rejected, (*where, sorted(e.message for e in ANY_SAMPLE.iter_errors(sample))[:3])


def test_the_float64_difference_is_real_and_narrow() -> None:
    """The one documented difference (see ``as_stored``), so that it is noticed if it goes away or widens."""
    metric = {"kind": "metric", "entity": "e", "name": "n", "time": 1.0}
    over = {**metric, "value": 10**18 + 1}
    assert not reference_accepts(over) and reference_accepts(as_stored(over))
    decoded = decode_telemetry(
        json.dumps({"schema": "driftlog.telemetry/1", "source": "t", "samples": [over]}).encode()
    )
    assert decoded.count() == 1 and decoded.batches[0].columns["value"].tolist() == [1e18]
    well_over = {**metric, "value": 10**18 + 2**7}  # beyond the rounding step: both refuse
    assert not reference_accepts(as_stored(well_over))
    raw = json.dumps({"schema": "driftlog.telemetry/1", "source": "t", "samples": [well_over]}).encode()
    assert [r.reason for r in decode_telemetry(raw).rejects] == ["out_of_range"]


# every edge of every field, both forms, both paths (systematic: a fault in one bound cannot hide by chance)

BASE = {
    "op": {"kind": "op", "job": "j", "step": 3, "rank": 5, "op": "allreduce", "op_class": "comm", "start": 10.0,
           "duration": 0.25, "group": "dp-0", "seq": 17},
    "metric": {"kind": "metric", "entity": "device:n1/gpu0", "name": "power_w", "value": 612.5, "time": 10.0},
    "step": {"kind": "step", "job": "j", "step": 3, "start": 10.0, "duration": 1.5, "output_units": 4096},
    "topology": {"kind": "topology", "relation": "placed_on", "src": "rank:j/5", "dst": "device:n1/gpu0",
                 "time": 0.0},
}  # fmt: skip


def as_messages(sample: dict[str, Any]) -> list[tuple[bytes, int]]:
    """The sample row-wise (twice: one kind, so the fast path may take it) and as a one-row column batch."""
    data = {k: [v] for k, v in sample.items() if k != "kind"}
    batch = {"kind": sample.get("kind"), "n": 1, "data": data}
    return [
        (json.dumps({"schema": TELEMETRY_ID, "source": "t", "samples": [sample, sample]}).encode(), 2),
        (json.dumps({"schema": TELEMETRY_ID, "source": "t", "columns": [batch]}).encode(), 1),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_every_edge_of_every_field_agrees_with_the_json_schema_on_both_paths(kind: str) -> None:
    base = BASE[kind]
    assert reference_accepts(base)
    cases = [{**base, name: v} for name, spec in DEFS[kind]["properties"].items() for v in edge_values(spec)]
    cases += [{k: v for k, v in base.items() if k != name} for name in base]  # each field missing
    verdicts = set()
    for sample in cases:
        accepted = reference_accepts(as_stored(sample))
        verdicts.add(accepted)
        for raw, n in as_messages(sample):
            decoded = decode_telemetry(raw)
            assert accounting_violations(decoded) == [], shown(raw)
            assert decoded.count() == (n if accepted else 0), (sample, decoded.rejects, shown(raw))
            assert_same(decoded, precise(raw), raw)
    assert verdicts == {True, False}


def test_every_edge_of_every_decision_field_agrees_with_the_json_schema() -> None:
    base = {"schema": DECISION_ID, "id": "d-1", "time": 10.0, "controller": "c", "layer": "power",
            "action": "cap", "targets": ["device:n1/gpu0"], "expected_effect": {"metric": "power_w"}}  # fmt: skip
    cases = [{**base, name: v} for name, spec in DECISION["properties"].items() for v in edge_values(spec)]
    cases += [{k: v for k, v in base.items() if k != name} for name in base]
    for doc in cases:
        decision, reject = decode_decision(json.dumps(doc).encode())
        assert (decision is not None) == DECISION_REFERENCE.is_valid(doc), (doc, reject)


# ---- 1c: the fast path against the precise path ----------------------------------------------------------------


@fuzz_settings(500)
@given(seed=SEEDS)
def test_fast_path_agrees_with_the_precise_path(seed: int) -> None:
    msg = gen(seed, FAST).message()
    if decode_fast(msg.raw) is not None:  # else decode_telemetry is the precise path itself
        with mock.patch.object(envelope, "decode_native", lambda raw: None):
            assert_same(decode_telemetry(msg.raw), precise(msg.raw), msg.raw)


def test_the_fast_path_generator_reaches_the_fast_path() -> None:
    """The comparison above is only worth something if the fast path answers for a good share of messages,
    row-wise and columnar, with samples in them."""
    answered = {"rows": 0, "columns": 0, "refused": 0}
    for seed in range(300):
        raw = gen(seed, FAST).message().raw
        if decode_fast(raw) is None:
            answered["refused"] += 1
            continue
        doc = json.loads(raw)
        answered["rows"] += bool(doc.get("samples"))
        answered["columns"] += any(c["n"] for c in doc.get("columns") or ())
    assert answered["rows"] >= 60 and answered["columns"] >= 60, answered


# ---- 1d: decisions ------------------------------------------------------------------------------------------------


@fuzz_settings(600)
@given(seed=SEEDS)
def test_decode_decision_never_raises_and_agrees_with_the_json_schema(seed: int) -> None:
    msg = gen(seed, FUZZ).decision()
    decision, reject = decode_decision(msg.raw)
    where = shown(msg.raw)
    assert (decision is None) != (reject is None), where
    if reject is not None:
        assert reject.index is None and reject.reason and reject.detail, where
    else:
        assert decision is not None
        assert set(decision) == {rule.name for rule in decision_rules()}, where
    if not msg.strict:
        return
    doc = json.loads(msg.raw)
    assert (decision is not None) == DECISION_REFERENCE.is_valid(doc), (
        reject,
        sorted(e.message for e in DECISION_REFERENCE.iter_errors(doc))[:3],
        where,
    )
    if decision is not None:
        for name, spec in DECISION["properties"].items():
            if name != "schema":
                expected = doc.get(name, spec.get("default"))
                assert decision[name] == (float(expected) if spec.get("type") == "number" else expected), where


# ---- bugs this suite found (fixed; kept as regressions) ------------------------------------------------

STEP = {"kind": "step", "job": "j", "step": 1, "start": 0.0, "duration": 1.0}


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"])
def test_bytes_that_are_not_utf8_in_a_string_are_malformed_json(bad: bytes) -> None:
    """decode_fast catches msgspec.ValidationError and DecodeError, but msgspec raises UnicodeDecodeError for a
    string of a known field that is not UTF-8, so decode_telemetry raises instead of refusing the message."""
    raw = b'{"schema":"driftlog.telemetry/1","source":"' + bad + b'","samples":[]}'
    assert [(r.reason, r.index) for r in decode_telemetry(raw).rejects] == [("malformed_json", None)]


@pytest.mark.parametrize("bad_batch", [{"kind": "step", "n": "1", "data": {}}, None, {"kind": "step", "data": {}}])
def test_a_batch_without_a_valid_n_refuses_the_message(bad_batch: Any) -> None:
    """_decode_columns rejects the batch with index=offset but takes 0 positions: the reject's index is also
    the next batch's first sample (here sample 0 is both accepted and rejected)."""
    raw = orjson.dumps(
        {
            "schema": TELEMETRY_ID,
            "source": "t",
            "columns": [bad_batch, {"kind": "step", "n": 1, "data": {k: v for k, v in STEP.items() if k != "kind"}}],
        }
    )
    assert accounting_violations(decode_telemetry(raw)) == []


def test_a_negative_n_does_not_lift_the_limit_of_samples() -> None:
    """_check_envelope sums every integer n, negative ones included, before _decode_columns refuses them: a
    524-byte message with n=-1000000 and five scalar batches of n=200000 yields 1,000,000 accepted samples
    (the limit is 200,000; under 4 MB of such batches make billions of rows)."""
    full = {"kind": "metric", "n": 200_000, "data": {"entity": "e", "name": "n", "value": 1.0, "time": 1.0}}
    lower = {"kind": "metric", "n": -1_000_000, "data": {}}
    raw = orjson.dumps({"schema": TELEMETRY_ID, "source": "t", "columns": [lower, *[full] * 5]})
    decoded = decode_telemetry(raw)
    assert decoded.total <= 200_000, (len(raw), decoded.count())


def test_an_unknown_column_of_any_length_is_ignored_by_both_paths() -> None:
    """The precise path refuses a batch when any list in 'data' (known column or not) lacks n entries; the
    msgspec struct ignores unknown columns, so the fast path accepts both samples."""
    data = {"job": "j", "step": [1, 2], "start": 0.0, "duration": 1.0, "extra": [1, 2, 3]}
    raw = orjson.dumps({"schema": TELEMETRY_ID, "source": "t", "columns": [{"kind": "step", "n": 2, "data": data}]})
    assert decode_fast(raw) is not None
    assert_same(decode_telemetry(raw), precise(raw), raw)


def test_a_seq_beyond_63_bits_is_refused_by_both_paths() -> None:
    """seq has no maximum in the schema. The fast path accepts seq = 2**64 (msgspec reads big integers); the
    precise path (taken as soon as any sample is bad) gets 1.8446744073709552e19 from orjson and refuses the
    whole message as wrong_type. So whether the message is refused depends on its other samples."""
    raw = json.dumps({"schema": TELEMETRY_ID, "source": "t", "seq": 2**64, "samples": [STEP]}).encode()
    assert_same(decode_telemetry(raw), precise(raw), raw)


def test_decision_defaults_are_not_shared() -> None:
    """The default {} of 'parameters' and 'expected_effect' is the dict in the cached schema rules, handed out
    to every decision that omits the field: changing one decision's parameters changes all later ones."""
    raw = json.dumps(
        {"schema": DECISION_ID, "id": "a", "time": 1, "controller": "c", "layer": "power", "action": "cap",
         "targets": ["x"]}
    ).encode()  # fmt: skip
    first, _ = decode_decision(raw)
    assert first is not None
    first["parameters"]["cap_w"] = 450
    try:
        second, _ = decode_decision(raw)
        assert second is not None and second["parameters"] == {}
    finally:
        first["parameters"].pop("cap_w")  # the shared default, for the tests that run after this one


@pytest.mark.parametrize("text", [b"\\ud800", b"\xed\xa0\x80"])
def test_lone_surrogates_are_refused(text: bytes) -> None:
    """orjson refuses a lone surrogate (escaped, or as the bytes ED A0 80); the json fallback in parse_json
    accepts both. The decision is accepted, and the worker then fails to encode it (Processor.decision raises
    UnicodeEncodeError in _rid)."""
    raw = (
        b'{"schema":"driftlog.decision/1","id":"' + text + b'","time":1,"controller":"c","layer":"power",'
        b'"action":"cap","targets":["x"]}'
    )
    decision, _ = decode_decision(raw)
    assert decision is None or orjson.dumps(decision)
