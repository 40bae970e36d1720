"""The native decoder (``native/src/decode.rs``) against the Python decoder, on the fuzz corpora of
``bench/fuzz_decoder.py`` and on the edges of every field: whenever it answers, the message decodes exactly as
the Python decoder decodes it (same source, seq and total, no rejects, the same columns bit for bit); when the
Python decoder refuses anything in a message, the native one does not answer, so the dead letters and their
reasons are the Python decoder's. Without the native core (or with DRIFTLOG_NATIVE=0) it never answers."""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
from dataclasses import replace
from unittest import mock

import numpy as np
import orjson
import pytest

from bench.fuzz_decoder import DEFS, DIFFERENTIAL, FAST, FUZZ, KINDS, Knobs, edge_values
from streams.contract import envelope, native_decode
from streams.contract.envelope import Decoded, SampleBatch, decode_telemetry
from streams.contract.native_decode import decode_native
from tests.conftest import require_native
from tests.unit.test_contract_fuzz import BASE, as_messages, assert_same, gen, precise


@pytest.fixture(autouse=True)
def _native_decoder() -> None:
    """Skipped without the native core, a failure under DRIFTLOG_REQUIRE_NATIVE=1 (CI); an extension built
    before the decoder existed fails there too (`make` rebuilds it)."""
    require_native()
    if not native_decode.available:
        pytest.fail("driftlog_native has no TelemetryDecoder: an old build (run make)")


TELEMETRY_ID = "driftlog.telemetry/1"


def native_or_precise(raw: bytes) -> Decoded:
    """decode_telemetry with msgspec switched off: the native decoder's answer, or the precise path's."""
    with mock.patch.object(envelope, "decode_fast", lambda raw: None):
        return decode_telemetry(raw)


def check(raw: bytes) -> bool:
    """Whether the native decoder answered; when it did, the Python decoder accepts the whole message and
    gives the same columns, and the time bounds the native decoder told are those the definition tells."""
    answered = decode_native(raw) is not None
    want = precise(raw)
    if answered:
        assert want.rejects == [], (want.rejects[:3], raw[:2000])
        got = native_or_precise(raw)
        assert_same(got, want, raw)
        for batch in got.batches:
            assert told(batch) in (None, bits(SampleBatch(batch.kind, batch.index, batch.columns).time_bounds()))
    return answered


def bits(ends: tuple[float, float] | None) -> bytes | None:
    """Time bounds bit for bit (a NaN's, a zero's sign)."""
    return None if ends is None else struct.pack("<2d", *ends)


def told(batch: SampleBatch) -> bytes | None:
    """The time bounds the native decoder told with ``batch`` (bit for bit), or None."""
    return bits(batch.__dict__.get("_ends"))


@pytest.mark.parametrize(("knobs", "seeds", "least"), [(FUZZ, 3000, 300), (FAST, 2000, 900), (DIFFERENTIAL, 1500, 100)])
def test_the_native_decoder_agrees_with_the_python_decoder_on_the_fuzz_corpora(
    knobs: Knobs, seeds: int, least: int
) -> None:
    answered = sum(check(gen(seed, knobs).message().raw) for seed in range(seeds))
    assert answered >= least, answered  # the comparison is only worth something if it answers often


def test_larger_messages_of_one_kind_agree() -> None:
    """Up to 300 samples per message; most hold one the Python decoder refuses (a lone surrogate in a
    string, a NaN), and the native one must not answer for those."""
    knobs = replace(FAST, mutate=0.0, harmless=0.5, max_samples=300, max_rows=300)
    answered = accepted = 0
    for seed in range(200):
        raw = gen(seed, knobs).message().raw
        answered += check(raw)
        accepted += not precise(raw).rejects
    assert answered >= 20 and answered >= 0.5 * accepted, (answered, accepted)


@pytest.mark.parametrize("kind", KINDS)
def test_every_edge_of_every_field_agrees(kind: str) -> None:
    base = BASE[kind]
    cases = [{**base, name: v} for name, spec in DEFS[kind]["properties"].items() for v in edge_values(spec)]
    cases += [{k: v for k, v in base.items() if k != name} for name in base]
    answered = [check(raw) for sample in cases for raw, _ in as_messages(sample)]
    assert any(answered) and not all(answered)


def envelope_with(body: str) -> bytes:
    return ('{"schema":"driftlog.telemetry/1","source":"s",' + body + "}").encode()


STEP_DATA = '"data":{"job":"j","step":[1,2],"start":0.5,"duration":[1.0,2]}'


@pytest.mark.parametrize(
    "raw",
    [
        envelope_with(f'"columns":[{{"kind":"step","n":2,{STEP_DATA}}}]'),
        envelope_with(f'"columns":[{{{STEP_DATA},"n":2,"kind":"step"}}]'),  # data before kind and n
        envelope_with(f'"columns":[{{"kind":"step","n":2,{STEP_DATA},"kind":"step"}}]'),  # a key twice
        envelope_with('"seq":3,"seq":3,"samples":[]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":-0,"duration":1e0}]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":-0,"start":0,"duration":1E-2}]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1.0,"start":0,"duration":1}]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1,"job":"k"}]'),
        envelope_with('"samples":[{"kind":"step","job":"\\u006a\\n","step":1,"start":0,"duration":1}]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1,"x":"a\x01b"}]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1,"x":"\\ud83d\\ude00"}]'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1,"x":1e999}]'),
        envelope_with(
            '"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1,"x":' + "[" * 200 + "]" * 200 + "}]"
        ),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1}],"sent_at":NaN'),
        envelope_with('"samples":[{"kind":"step","job":"j","step":1,"start":0,"duration":1}]') + b" x",
        envelope_with('"samples":[],"x":' + "[" * 1025 + "]" * 1025),
        b"\xef\xbb\xbf" + envelope_with('"samples":[]'),
        envelope_with('"samples":null,"columns":null'),
        envelope_with('"samples":null,"columns":[]'),
        envelope_with('"samples":[],"seq":null'),
        envelope_with('"samples":[],"seq":9223372036854775807'),
        envelope_with('"samples":[],"seq":9223372036854775808'),
        envelope_with('"samples":[],"seq":true'),
        envelope_with('"samples":{}'),
        b'["driftlog.telemetry/1","s",null,[]]',
        envelope_with('"columns":[{"kind":"step","n":0,"data":{"job":"","step":1,"start":0,"duration":1}}]'),
        envelope_with('"columns":[{"kind":"step","n":1.0,"data":{"job":"j","step":1,"start":0,"duration":1}}]'),
        envelope_with(
            '"columns":[{"kind":"metric","n":2,"data":{"entity":["a","b"],"name":"n","value":[1,18446744073709551616],"time":0}}]'
        ),
        envelope_with(
            '"columns":[{"kind":"metric","n":2,"data":{"entity":["a","b"],"name":"n","value":[1,null],"time":0}}]'
        ),
        envelope_with(
            '"columns":[{"kind":"metric","n":2,"data":{"entity":["a","b"],"name":"n","value":[1,2],"time":0,"x":[1]}}]'
        ),
        envelope_with(
            '"columns":[{"kind":"metric","n":1,"data":{"entity":["a"],"name":"n","value":[1e18],"time":[1e10]}}]'
        ),
        envelope_with(
            '"columns":[{"kind":"metric","n":1,"data":{"entity":["a"],"name":"n","value":[1000000000000000001],"time":[1e10]}}]'
        ),
        envelope_with(
            '"columns":[{"kind":"metric","n":1,"data":{"entity":["a"],"name":"n","value":[0.1e1],"time":[5e-324]}}]'
        ),
    ],
)
def test_edge_messages_agree(raw: bytes) -> None:
    check(raw)


def test_it_answers_for_the_simulators_messages() -> None:
    from streams.sim.scenarios import training_fabric

    values = [value for kind, _, value in training_fabric(seed=2, ranks=16, steps=4).run() if kind == "telemetry"]
    assert all(check(value) for value in values)
    assert all(told(batch) for value in values for batch in decode_telemetry(value).batches)


@pytest.mark.parametrize(
    ("times", "ends"),
    [
        ("[3.5,1.25,2]", (1.25, 3.5)),
        ("[2.5,1e-300,7]", (1e-300, 7.0)),
        ("[5e-324,1e10]", (5e-324, 1e10)),
        ("4.5", (4.5, 4.5)),  # one value standing for every row
        ("[1,0,2]", None),  # a zero end: the sign numpy picks among zeros is its own
        ("[0.0,1]", None),
        ("[-0.0,2]", None),
    ],
)
def test_it_tells_the_time_bounds_of_a_batch(times: str, ends: tuple[float, float] | None) -> None:
    """The ends of a batch's event times, told with its columns, except where a zero is an end; the other
    ends are those the definition tells (``check``)."""
    n = times.count(",") + 1 if times.startswith("[") else 3
    entity = json.dumps(["e"] * n)
    raw = envelope_with(
        f'"columns":[{{"kind":"metric","n":{n},"data":{{"entity":{entity},"name":"n","value":1,"time":{times}}}}}]'
    )
    assert check(raw)
    (batch,) = decode_telemetry(raw).batches
    assert told(batch) == bits(ends)


def test_numbers_parse_as_python_reads_them() -> None:
    """Correctly rounded, like Python's float(): random digits, long mantissas, tiny and huge exponents."""
    rng = random.Random(7)
    texts = [repr(rng.uniform(0, 1e10)) for _ in range(300)]
    texts += [f"{rng.randint(0, 10**17)}.{rng.randint(0, 10**25):025d}" for _ in range(300)]
    texts += [f"{rng.randint(1, 9)}.{rng.randint(0, 10**18)}e-{rng.randint(1, 320)}" for _ in range(300)]
    texts += ["9007199254740993", "1e10", "0.30000000000000004", "2.2250738585072011e-308", "4.9406564584124654e-324"]
    data = {"entity": ["e"] * len(texts), "name": "n", "time": 0}
    raw = orjson.dumps(
        {"schema": TELEMETRY_ID, "source": "s", "columns": [{"kind": "metric", "n": len(texts), "data": data}]}
    )
    raw = raw.replace(b'"time":0', b'"time":0,"value":[' + ",".join(texts).encode() + b"]")
    got = decode_native(raw)
    assert got is not None
    assert got[2][0][2]["value"].tolist() == [float(t) for t in texts]
    assert check(raw)


FLOAT_EDGES = [
    "-0.0", "-0", "0e0", "1E5", "1e+5", "1.5e-3", "-2.5E-7", "12345678901234567890123", "18446744073709551616",
    "-9223372036854775809", "0.1000000000000000055511151231257827021181583404541015625", "1.7976931348623157e308",
    "1.7976931348623159e308", "2.4703282292062328e-324", "2.4703282292062327e-324", "4.9e-324",
    "2.2250738585072011e-308", "1e-400", "-1e-400", "0e99999999999999999999", "1e400", "9007199254740993",
    "1" + "0" * 400, "0." + "0" * 400 + "1", "1e-18", "-1e18", "-1.0000000000000002e18",
]  # fmt: skip
INT_EDGES = [
    "0", "-1", "-0", "3.0", "1e2", "1E2", "-2", "9007199254740992", "9007199254740993", "999999999999999999",
    "1000000000000000000", "1000000000000000000000", "-9223372036854775809", "18446744073709551616", "017",
]  # fmt: skip


def numeric_column(kind: str, field: str, tokens: str, *, minus_zero: bool = False) -> bytes:
    """A two-row batch of ``kind`` whose ``field`` column is the JSON text ``tokens`` (an array as written,
    spaces and all); ``minus_zero``: an integer -0 elsewhere in the message (a field the contract skips)."""
    data = {k: [v, v] for k, v in BASE[kind].items() if k not in ("kind", field)}
    batch = {"kind": kind, "n": 2, "data": {**data, field: "@"}}
    extra = {"note": "@@"} if minus_zero else {}
    raw = json.dumps({"schema": TELEMETRY_ID, "source": "s", **extra, "columns": [batch]})
    return raw.replace('"@@"', "-0").replace('"@"', tokens).encode()


@pytest.mark.parametrize("token", FLOAT_EDGES)
@pytest.mark.parametrize("minus_zero", [False, True])
def test_number_columns_agree_on_the_edges_of_numbers(token: str, minus_zero: bool) -> None:
    """Exponents, -0.0 (refused when the message also holds an integer -0, which serde_json would read as
    -0.0 too), 17+ digit mantissas, subnormals, huge exponents, integers beyond 64 bits, odd spacing."""
    for tokens in (f"[{token}, 1.5]", f"[ 2 ,\n{token} ]", f"[{token},{token}]"):
        raw = numeric_column("metric", "value", tokens, minus_zero=minus_zero)
        answered = check(raw)
        value = float(token)
        if abs(value) <= 1e18 and not (str(value) == "-0.0" and (minus_zero or token == "-0")):
            assert answered, raw  # valid: the native decoder answers, and check() compared its columns
        else:
            assert not answered, raw


@pytest.mark.parametrize("token", INT_EDGES)
def test_integer_columns_agree_on_the_edges_of_integers(token: str) -> None:
    """An integer written as 3.0 or 1e2, -0, 18 and more digits, beyond 64 bits: deferred, or read as
    the Python decoder reads it."""
    for tokens in (f"[{token}, 4]", f"[ 4 ,\t{token} ]"):
        raw = numeric_column("op", "seq", tokens)
        answered = check(raw)
        valid = (token.lstrip("-").isdigit() and token != "-0" and not token.startswith("0")) or token == "0"
        assert answered == (valid and -1 <= int(token) <= 2**53), raw


def test_a_number_written_again_reads_as_the_first() -> None:
    """A float column's value written as the one before it is taken from it, only when it ends there too:
    longer, with an exponent, a second point, spaces or a cut after it, it is read (or deferred) as any."""
    answered = ("[1.5,1.5]", "[1.5 , 1.5 ]", "[1.5,\n1.5]", "[1.5,1.55]", "[1.5,1.5e2]", "[15,1]", "[-0.5,-0.5]",
                "[0.1000000000000000055511151231257827021181583404541015625,0.1]")  # fmt: skip
    for tokens in answered:
        raw = numeric_column("metric", "value", tokens)
        assert check(raw), tokens
    for tokens in ("[1.5,1.5.]", "[1.5,1.5x]", "[1.5,1.5", "[1.5,1.5e]", "[1.5,1.5,]", "[1.5,1.5-]", "[1e400,1e400]"):
        assert not check(numeric_column("metric", "value", tokens)), tokens


def test_number_columns_not_arrays_of_numbers_are_deferred() -> None:
    for tokens in ('[1, "2"]', "[1, null]", "[1, [2]]", "[1]", "[1, 2, 3]", "[]", "null", "true", '"1"', "{}"):
        assert not check(numeric_column("metric", "value", tokens)), tokens
    assert check(numeric_column("metric", "value", "7"))  # one value standing for every row


OP_BATCH = (
    '{"schema":"driftlog.telemetry/1","source":"s","seq":4,"columns":[{"kind":"op","n":2,"data":{"job":"j",'
    '"step":3,"rank":[5,6],"op":["allreduce","send"],"op_class":"comm","start":[10.0,10.5],"duration":[0.25,1e-3],'
    '"group":["dp-0","dp-0"],"seq":[17,18],"blocking":[true,false]}}]}'
)
LAYOUTS = {  # the columnar layout, changed: (what is replaced, by what), each answered or not as the Python decoder
    "as is": ("", ""),
    "spaces": (",", " ,\n\t "),
    "colon spaces": (":", " : "),
    "seq null": ('"seq":4,"columns"', '"seq":null,"columns"'),
    "seq 19 digits": ('"seq":4,', '"seq":1000000000000000000,'),
    "seq negative": ('"seq":4,', '"seq":-4,'),
    "seq a float": ('"seq":4,', '"seq":4.0,'),
    "columns null": ('"columns":[', '"samples":null,"columns":['),
    "n a float": ('"n":2,', '"n":2.0,'),
    "n negative": ('"n":2,', '"n":-2,'),
    "no kind nor n": ('"kind":"op","n":2,"data":{', '"data":{'),
    "source twice": ('"source":"s",', '"source":"t","source":"s",'),
    "kind twice": ('"kind":"op",', '"kind":"op","kind":"op",'),
    "column twice": ('"rank":[5,6],', '"rank":[1,2],"rank":[5,6],'),
    "unknown field": ('"seq":4,', '"seq":4,"note":{"a":[1,"b"]},'),
    "unknown batch field": ('"n":2,', '"n":2,"note":1,'),
    "unknown column": ('"job":"j",', '"job":"j","color":["red","blue"],'),
    "escaped string": ('"send"', '"s\\u0065nd"'),
    "escaped key": ('"source"', '"\\u0073ource"'),
    "escaped quote": ('"send"', '"se\\"nd"'),
    "control character": ('"send"', '"se\tnd"'),
    "trailing comma": ('"seq":[17,18]', '"seq":[17,18,]'),
    "trailing object comma": ("[true,false]}", "[true,false],}"),
    "trailing bytes": ("]}}]}", "]}}]}x"),
    "trailing space": ("]}}]}", "]}}]} \n"),
    "leading space": ('{"schema"', ' \r\n{"schema"'),
    "booleans as ints": ("[true,false]", "[1,0]"),
    "one boolean": ("[true,false]", "true"),
    "a literal cut": ("[true,false]", "[tru,false]"),
    "too few": ('"seq":[17,18]', '"seq":[17]'),
    "too many strings": ('["dp-0","dp-0"]', '["dp-0","dp-0","dp-1"]'),
    "no data": ('"data":{', '"data":{},"x":{'),
    "leading zero": ("[10.0,10.5]", "[010.0,10.5]"),
    "no fraction digits": ("[10.0,10.5]", "[10.,10.5]"),
    "no integer digits": ("[10.0,10.5]", "[.5,10.5]"),
    "minus no integer digits": ("[0.25,1e-3]", "[-.25,1e-3]"),
    "no exponent digits": ("[0.25,1e-3]", "[0.25,1e-]"),
    "infinity": ("[0.25,1e-3]", "[0.25,Infinity]"),
    "nan": ("[0.25,1e-3]", "[0.25,NaN]"),
    "plus sign": ("[0.25,1e-3]", "[+0.25,1e-3]"),
    "exponent sign": ("[0.25,1e-3]", "[0.25E+0,1e-3]"),
    "integer leading zero": ("[5,6]", "[05,6]"),
    "integer as a float": ("[5,6]", "[5.0,6]"),
    "string for a number": ("[10.0,10.5]", '["10.0",10.5]'),
    "null in a column": ('["dp-0","dp-0"]', '["dp-0",null]'),
    "n 0, columns not empty": ('"n":2,"data":{', '"n":0,"data":{"rank":[],'),
    "two batches": ("}}]}", '}},{"kind":"metric","n":1,"data":{"entity":["e"],"name":"n","value":1,"time":0}}]}'),
    # a string column's value like the one before it (read by its bytes when the same)
    "string again, spaced": ('["dp-0","dp-0"]', '[ "dp-0" ,\n"dp-0" ]'),
    "string again, longer": ('["dp-0","dp-0"]', '["dp-0","dp-01"]'),
    "string again, shorter": ('["dp-0","dp-0"]', '["dp-0","dp-"]'),
    "string again, empty": ('["dp-0","dp-0"]', '["","dp-0"]'),
    "string again, escaped": ('["dp-0","dp-0"]', '["dp-0","dp-0\\n"]'),
    "string again, control": ('["dp-0","dp-0"]', '["dp-0","dp-0\t"]'),
    "string again, cut": ('"dp-0"],"seq":[17,18],"blocking":[true,false]}}]}', '"dp-0'),
    "string again, unclosed": ('["dp-0","dp-0"]', '["dp-0","dp-0]'),
    "string again, unquoted": ('["dp-0","dp-0"]', '["dp-0",xdp-0"]'),
}  # fmt: skip


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_columnar_reader_answers_as_serde_json_does(layout: str) -> None:
    """The native core reads the usual columnar layout itself and leaves anything else to serde_json: a key
    twice, escapes, unknown fields, odd spacing and malformed JSON all decode as the Python decoder does."""
    old, new = LAYOUTS[layout]
    raw = OP_BATCH.replace(old, new) if old else OP_BATCH
    assert raw != OP_BATCH or layout == "as is"
    answered = check(raw.encode())
    answers = ("as is", "spaces", "colon spaces", "seq null", "trailing space", "leading space", "two batches")
    if layout in (*answers, "string again, spaced", "string again, longer", "string again, shorter"):
        assert answered, layout


def test_the_columnar_reader_answers_as_serde_json_does_on_cut_and_spliced_bytes() -> None:
    """Every cut of the layout, and a byte dropped or spliced in (a space, a NUL, a two-byte character or
    half of one) at every place: never an exception, and an answer only where the Python decoder agrees."""
    raw = OP_BATCH.encode()
    splices = (b" ", b"\x00", "é".encode(), "é".encode()[:1])
    answered = 0
    for at in range(len(raw) + 1):
        variants = [raw[:at], raw[:at] + raw[at + 1 :], *(raw[:at] + s + raw[at:] for s in splices)]
        answered += sum(check(v) for v in variants)
    assert answered >= 200, answered  # (spaces between tokens, and the message itself, are read)


def test_without_the_native_core_it_never_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = as_messages(BASE["op"])[1][0]
    assert decode_native(raw) is not None
    monkeypatch.setattr(native_decode, "available", False)
    assert decode_native(raw) is None
    assert_same(decode_telemetry(raw), precise(raw), raw)


def test_strings_are_python_strings_and_columns_writable() -> None:
    raw = json.dumps({"schema": TELEMETRY_ID, "source": "s", "samples": [BASE["op"], {**BASE["op"], "op": "é😀"}]})
    decoded = native_or_precise(raw.encode())
    (batch,) = decoded.batches
    assert [type(v) for v in batch.columns["op"].tolist()] == [str, str]
    for column in batch.columns.values():
        column[:1] = column[1:2]  # the engine may write into them


@pytest.mark.parametrize("reader", ["columnar", "serde_json"])
def test_a_small_message_of_many_huge_batches_is_deferred_without_making_their_rows(reader: str) -> None:
    """64 batches of 200,000 rows of one repeated value each: 9 KB of JSON, 12.8 M rows. Deferred (the Python
    decoder refuses it as oversized) with no more than one batch's rows made, read by either native reader (an
    unknown envelope key sends the message to serde_json's)."""
    require_native()
    extra = ', "x": 1' if reader == "serde_json" else ""
    code = f"""
import json, resource
from streams.contract.native_decode import decode_native
batch = {{"kind": "op", "n": 200_000, "data": {{"job": "j", "step": 0, "rank": 0, "op": "matmul",
         "op_class": "compute", "start": 0.0, "duration": 1.0}}}}
raw = json.dumps({{"schema": "driftlog.telemetry/1", "source": "s", "columns": [batch] * 64}})
raw = raw[:-1] + {extra!r} + "}}"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert decode_native(raw.encode()) is None
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(done.stdout) < 200, f"{done.stdout} MB more at its peak (made every batch's rows: ~1,300)"
    assert [r.reason for r in decode_telemetry(json.dumps({"schema": "driftlog.telemetry/1", "source": "s",
            "columns": [{"kind": "op", "n": 200_000, "data": {}}] * 2}).encode()).rejects] == ["oversized"]  # fmt: skip


def test_strings_at_holds_the_codes_strings_and_refuses_what_it_cannot_fill() -> None:
    """The string columns' gather (``native/src/objects.rs``): ``strings[code]`` per code, each string one
    more reference while the array holds it and none after; a code beyond the strings, an output of another
    length or type, or read-only, is refused before anything is written."""
    core = native_decode.native.core
    assert core is not None
    strings = ["".join(["dev", str(i)]) for i in range(3)]  # (objects of their own: their references counted)
    before = [sys.getrefcount(s) for s in strings]
    codes = np.array([2, 0, 2, 1, 2], np.uint32)
    out = np.empty(5, object)
    core.strings_at(strings, codes, out)
    assert [id(s) for s in out] == [id(strings[c]) for c in codes]
    after = [sys.getrefcount(s) for s in strings]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 3]
    del out
    assert [sys.getrefcount(s) for s in strings] == before
    for bad_codes, bad_out in [
        (np.array([0, 3], np.uint32), np.empty(2, object)),
        (codes, np.empty(4, object)),
        (codes, np.empty(5, np.float64)),
        (codes, np.empty((5, 1), object)),
    ]:
        with pytest.raises(ValueError):
            core.strings_at(strings, bad_codes, bad_out)
        assert all(v is None for v in bad_out.ravel()) if bad_out.dtype == object else True
    frozen = np.empty(5, object)
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        core.strings_at(strings, codes, frozen)
    assert [sys.getrefcount(s) for s in strings] == before
