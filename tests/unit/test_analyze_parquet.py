"""`analyze` of a Parquet file of sample rows reads it by columns, and writes what reading it row by row
writes: the same records with the same provenance; a file with other rows (decisions) is read row by row."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streams import analyze
from streams.contract.envelope import Decoded, decode_telemetry
from streams.errors import ConfigError
from streams.formats.parquet import Columns, rows_at
from streams.pipeline import Processor
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_contract_fuzz import assert_same

ROWS = analyze.ROWS_PER_MESSAGE


def sample_rows(scenario: str) -> list[dict[str, object]]:
    rows = []
    for kind, _, value in SCENARIOS[scenario](3, 16, 30).run():
        if kind == "telemetry":
            for batch in decode_telemetry(value).batches:
                rows.extend({"kind": batch.kind, **row} for row in batch.rows())
    return rows


def table(rows: list[dict[str, object]]) -> pa.Table:
    names = list(dict.fromkeys(k for row in rows for k in row))  # every kind's columns, null where absent
    return pa.table({name: [row.get(name) for row in rows] for name in names})


def encoded(path: Path) -> tuple[list[bytes], list[tuple[str, int]]]:
    """The engine's records as the audit topic carries them; dead letters as (reason, count): their
    positions and digests name the message they came in, which each reading cuts differently."""
    audit = analyze.analyze_files([path]).audit
    dead = sorted((r.body["reason"], r.body["count"]) for r in audit if r.type == "dead_letter")
    return [r.encode() for r in audit if r.type != "dead_letter"], dead


@pytest.mark.parametrize(("scenario", "chunk"), [("training-fabric", 20), ("training-fabric", 3), ("inference-sla", 1)])
def test_columns_and_rows_give_the_same_records(
    scenario: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "samples.parquet"
    rows = sample_rows(scenario)
    pq.write_table(table(rows), path, row_group_size=1_234)  # row groups cut across messages
    assert analyze.samples_only(path)
    monkeypatch.setattr(analyze, "CHUNK_MESSAGES", chunk)  # messages converted a chunk at a time
    by_columns = encoded(path)
    monkeypatch.setattr(analyze, "samples_only", lambda _: False)
    by_rows = encoded(path)
    assert by_columns == by_rows
    assert len(by_columns[0]) > 5


def test_a_file_with_decisions_is_read_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "mixed.parquet"
    rows = sample_rows("training-fabric")[:100]
    decision = {"kind": "decision", "id": "d-1", "time": 1.0, "controller": "c", "layer": "power", "action": "cap"}
    pq.write_table(table([*rows, decision]), path)
    assert not analyze.samples_only(path)


# ---- the columns go to the engine without the JSON envelope (streams/formats/parquet.py) ----------------------


def parquet_messages(path: Path) -> list[analyze.Message]:
    return list(analyze.parquet_columns(path))


def assert_same_batches(got: Decoded, want: Decoded) -> None:
    assert_same(got, want, b"")


def test_valid_columns_are_decoded_from_arrow_as_the_json_path_decodes_them(tmp_path: Path) -> None:
    path = tmp_path / "samples.parquet"
    rows = sample_rows("training-fabric")
    pq.write_table(table(rows), path, row_group_size=1_234)
    messages = parquet_messages(path)
    assert messages and all(m.decoded is not None for m in messages)  # every message by columns
    for m in messages:
        assert m.decoded is not None and callable(m.value)
        raw = m.value()
        assert_same_batches(m.decoded, decode_telemetry(raw))
        assert m.time == analyze.oldest(orjson.loads(raw))


def test_arrow_types_other_than_the_json_paths_decode_alike(tmp_path: Path) -> None:
    """Narrower (and unsigned) integers and floats, large strings, narrow dictionary indices and a left-out
    optional column: the same batches."""
    rows = [r for r in sample_rows("training-fabric") if r["kind"] == "op"][:3000]
    columns = table(rows).drop_columns(["device"])
    narrow = {"rank": pa.uint32(), "dp": pa.uint8(), "pp": pa.uint16(), "tp": pa.int8(), "peer": pa.int32(),
              "start": pa.float64(), "duration": pa.float32()}  # fmt: skip
    for name, kind in narrow.items():
        columns = columns.set_column(columns.schema.get_field_index(name), name, columns[name].cast(kind))
    columns = columns.set_column(columns.schema.get_field_index("op"), "op", columns["op"].cast(pa.large_string()))
    group = columns["group"].cast(pa.dictionary(pa.int8(), pa.string()))
    columns = columns.set_column(columns.schema.get_field_index("group"), "group", group)
    path = tmp_path / "narrow.parquet"
    pq.write_table(columns, path)
    (message,) = parquet_messages(path)
    assert message.decoded is not None and callable(message.value)
    assert_same_batches(message.decoded, decode_telemetry(message.value()))


def test_dictionary_encoded_strings_decode_alike(tmp_path: Path) -> None:
    """String columns a file stores as dictionaries (pandas categoricals), and dictionary entries no row
    uses (not a sample's, so not judged): the same batches as the JSON path."""
    rows = [r for r in sample_rows("training-fabric") if r["kind"] == "op"][:3000]
    columns = table(rows)
    for name in ("job", "op", "group"):
        columns = columns.set_column(columns.schema.get_field_index(name), name, columns[name].dictionary_encode())
    path = tmp_path / "dictionaries.parquet"
    pq.write_table(columns, path)
    (message,) = parquet_messages(path)
    assert message.decoded is not None and callable(message.value)
    assert_same_batches(message.decoded, decode_telemetry(message.value()))
    values = columns["op_class"].to_pylist()
    used = sorted(set(values))
    classes = pa.DictionaryArray.from_arrays(
        pa.array([used.index(c) for c in values], pa.int32()), pa.array([*used, "magic", "x" * 300])
    )  # the last two: used by no row
    unused = columns.set_column(columns.schema.get_field_index("op_class"), "op_class", classes)
    assert unused["op_class"].to_pylist() == columns["op_class"].to_pylist()
    decoded = Columns(unused).decoded(0, unused.num_rows, message.decoded.source, 0)
    assert decoded is not None
    assert_same_batches(decoded[0], message.decoded)


OP = {"kind": "op", "job": "j", "step": 1, "rank": 0, "op": "forward", "op_class": "compute", "start": 10.0,
      "duration": 0.5, "seq": 3, "group": "g", "blocking": False}  # fmt: skip
BAD_ROWS = {
    "null in a required field": {"rank": None},
    "null in a required string": {"op": None},
    "null in a number": {"duration": None},
    "null in an optional string": {"group": None},
    "null in an optional boolean": {"blocking": None},
    "not finite": {"duration": float("nan")},
    "out of range": {"duration": 1e9},
    "below the minimum": {"rank": -1},
    "not in the enumeration": {"op_class": "magic"},
    "too long": {"op": "x" * 300},
    "empty": {"job": ""},
    "a float for an integer": {"step": 1.5},
    "beyond 2**62": {"seq": 2**62 + 1},
}


@pytest.mark.parametrize("bad", list(BAD_ROWS), ids=list(BAD_ROWS))
def test_rows_that_break_the_rules_are_dead_lettered_as_by_the_json_path(
    bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{**OP, "rank": r, "start": 10.0 + r} for r in range(50)]
    rows[7] = {**rows[7], **BAD_ROWS[bad]}
    path = tmp_path / "bad.parquet"
    pq.write_table(table(rows), path)
    (message,) = parquet_messages(path)
    assert message.decoded is None and isinstance(message.value, bytes)  # the decoder judges the envelope
    by_columns = analyze.analyze_files([path]).audit
    dead = [r.body for r in by_columns if r.type == "dead_letter"]
    assert [(d["count"], d["indices"]) for d in dead] == [(1, [7])], dead
    monkeypatch.setattr(Columns, "decoded", lambda *_: None)  # the JSON path for every message
    assert [r.encode() for r in analyze.analyze_files([path]).audit] == [r.encode() for r in by_columns]
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
    as_jsonl = [r.body for r in analyze.analyze_files([jsonl]).audit if r.type == "dead_letter"]
    assert [(d["reason"], d["count"], d["indices"]) for d in as_jsonl] == [
        (d["reason"], d["count"], d["indices"]) for d in dead
    ]


def test_whatever_a_null_slot_holds_no_sample_reads_it() -> None:
    """Arrow leaves the value under a null undefined (here: out of range, not finite, an index past the
    dictionary): a null of a kind's field sends its message to the JSON path, and one in a column its kind
    has no such field, nothing."""
    n = 8
    valid = pa.py_buffer(np.packbits(np.arange(n) != 3, bitorder="little").tobytes())  # row 3 null

    def under_null(t: pa.DataType, values: np.ndarray) -> pa.Array:
        return pa.Array.from_buffers(t, n, [valid, pa.py_buffer(values.tobytes())], null_count=1)

    junk = {
        "rank": under_null(pa.int64(), np.where(np.arange(n) == 3, 2**63 - 1, np.arange(n))),
        "duration": under_null(pa.float64(), np.where(np.arange(n) == 3, np.nan, 0.5)),
        "group": pa.DictionaryArray.from_arrays(
            under_null(pa.int32(), np.where(np.arange(n) == 3, 1_000_000, 0).astype(np.int32)), pa.array(["g"])
        ),
        "op": pa.DictionaryArray.from_arrays(  # 128 entries: a null's code (the 129th) is past int8's range
            under_null(pa.int8(), np.where(np.arange(n) == 3, -1, 0).astype(np.int8)),
            pa.array(["forward", *(f"op{i}" for i in range(127))]),
        ),
    }
    ops = table([{**OP, "rank": r} for r in range(n)])
    for name, column in junk.items():
        with_null = ops.set_column(ops.schema.get_field_index(name), name, column)
        assert Columns(with_null).decoded(0, n, "s", 0) is None, name
        as_metric = with_null.drop_columns(["kind"]).add_column(0, "kind", pa.array(["op"] * 3 + ["metric"] * 5))
        metric = {"entity": ["device:n0/gpu0"] * n, "name": ["power_w"] * n, "value": [1.0] * n, "time": [5.0] * n}
        for field, values in metric.items():
            as_metric = as_metric.append_column(field, pa.array(values))
        decoded = Columns(as_metric).decoded(0, n, "s", 0)  # row 3, a metric, has no such field
        assert decoded is not None, name
        raw = orjson.dumps(analyze._envelope(as_metric, "s", 0))
        assert_same_batches(decoded[0], decode_telemetry(raw))


def test_a_late_sample_of_a_decoded_message_is_dead_lettered_with_the_envelopes_bytes(tmp_path: Path) -> None:
    """Admission refuses it after decoding: the dead letter's original is the envelope the JSON path writes."""
    metric = {"kind": "metric", "entity": "device:n1/gpu0", "name": "power_w", "value": 500.0}
    rows = [{**metric, "time": 10_000.0 + r / 100} for r in range(ROWS)] + [{**metric, "time": 10.0}]
    path = tmp_path / "late.parquet"
    pq.write_table(table(rows), path)
    messages = parquet_messages(path)
    assert all(m.decoded is not None for m in messages)
    dead = [r for r in analyze.analyze_files([path]).audit if r.type == "dead_letter"]
    assert [d.body["reason"] for d in dead] == ["late"]
    original = messages[-1].value() if callable(messages[-1].value) else messages[-1].value
    assert dead[0].body["original_sha256"] == hashlib.sha256(original).hexdigest()


@pytest.mark.parametrize("scenario", ["training-fabric", "inference-sla"])
def test_parquet_and_jsonl_of_the_same_samples_give_the_same_records(scenario: str, tmp_path: Path) -> None:
    rows = sample_rows(scenario)
    parquet, jsonl = tmp_path / "samples.parquet", tmp_path / "samples.jsonl"
    pq.write_table(table(rows), parquet)
    jsonl.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
    assert all(m.decoded is not None for m in parquet_messages(parquet))

    def records(path: Path) -> list[bytes]:
        """Each record but where it was read (the file's name); a dead letter's id and original name the
        message, which each file type writes differently."""
        out = []
        for r in analyze.analyze_files([path]).audit:
            dead = r.type == "dead_letter"
            body = {k: v for k, v in r.body.items() if not (dead and k in ("original_sha256", "original_bytes"))}
            out.append(orjson.dumps([r.type, None if dead else r.id, body, r.source.offset]))
        return out

    by_parquet = records(parquet)
    assert len(by_parquet) > 5
    assert by_parquet == records(jsonl)


def test_rows_of_a_null_or_unknown_kind_are_refused_or_dead_lettered_never_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = sample_rows("training-fabric")
    clean, dirty = tmp_path / "clean.parquet", tmp_path / "dirty.parquet"
    pq.write_table(table(rows), clean)
    bad = [{**rows[0], "kind": None}, {**rows[1], "kind": "bogus"}, {**rows[2], "kind": None}]
    pq.write_table(table(rows[:500] + bad + rows[500:]), dirty)
    with pytest.raises(ConfigError, match="3 unreadable lines"):  # analyze names them and stops
        encoded(dirty)
    monkeypatch.setattr(analyze, "samples_only", lambda _: True)  # the columnar reader given them anyway
    kept, dead = encoded(dirty)
    assert dead == [("unknown_kind", 3)]
    ids = [orjson.loads(r)["id"] for r in kept]  # (the bodies' provenance names messages cut otherwise)
    assert len(ids) > 5 and ids == [orjson.loads(r)["id"] for r in encoded(clean)[0]]


def test_rows_picked_by_slices_or_gathered_are_the_rows_take_picks() -> None:
    rng = np.random.default_rng(5)
    values = pa.table({"x": np.arange(1000), "s": pa.array([f"v{i % 7}" for i in range(1000)]).dictionary_encode()})
    cases = [np.arange(0), np.arange(10, 400), np.r_[0:5, 7:9, 500:1000], np.flatnonzero(rng.random(1000) < 0.3)]
    for rows in cases:
        for runs in (1, 64, 10_000):
            assert rows_at(values, rows, runs).to_pylist() == values.take(rows).to_pylist()


# ---- a Parquet file is read ahead on a thread of its own (analyze._ahead) -------------------------------------


def test_items_read_ahead_are_the_items_in_order_and_an_error_is_raised_where_it_was_met() -> None:
    def items() -> Iterator[int]:
        yield from range(5)
        raise ConfigError("unreadable")

    got = []
    with pytest.raises(ConfigError, match="unreadable"):
        for item in analyze._ahead(items(), 1):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]


def reading_ahead() -> int:
    return sum(t.name == analyze.READ_AHEAD_THREAD for t in threading.enumerate())


def test_a_reader_that_stops_early_ends_the_thread_reading_ahead() -> None:
    reader = analyze._ahead(iter(range(1000)), 2)
    assert next(reader) == 0
    assert reading_ahead() == 1  # the thread waits for room, items ahead
    reader.close()
    assert reading_ahead() == 0


@pytest.mark.parametrize("depth", [1, 3])
def test_the_thread_reads_at_most_depth_items_ahead_of_the_reader(depth: int) -> None:
    made = []

    def items() -> Iterator[int]:
        for i in range(100):
            made.append(i)
            yield i

    reader = analyze._ahead(items(), depth)
    for read in range(1, 4):
        assert next(reader) == read - 1
        deadline = time.monotonic() + 5
        while len(made) < read + depth and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # (room for one too many, if it would make it)
        assert len(made) == read + depth
    reader.close()


def test_analyze_ends_its_threads_reading_ahead_when_the_engine_raises(tmp_path: Path) -> None:
    path = tmp_path / "samples.parquet"
    pq.write_table(table(sample_rows("training-fabric")), path)
    assert analyze.samples_only(path)

    class Failing(Processor):
        def telemetry(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("engine")

    with pytest.raises(RuntimeError, match="engine") as raised:
        analyze.analyze_files([path, path], Failing())
    assert reading_ahead() == 0  # (while the caller keeps the exception and its frames: not left to the GC)
    assert raised.tb is not None


@pytest.mark.parametrize("cut", [0, 3000, -100])
def test_a_file_that_is_not_readable_parquet_is_a_one_line_error_naming_it(tmp_path: Path, cut: int) -> None:
    """Not Parquet, cut short, or its footer damaged: the file named, what to do, no traceback (``cut`` 0:
    another format's bytes; > 0: the file's first bytes; < 0: its last bytes overwritten)."""
    whole = tmp_path / "whole.parquet"
    pq.write_table(table(sample_rows("training-fabric")), whole)
    data = whole.read_bytes()
    bad = tmp_path / "bad.parquet"
    if cut == 0:
        bad.write_bytes(b"PAR1" + b"not parquet" * 10 + b"PAR1")
    elif cut > 0:
        bad.write_bytes(data[:cut])
    else:
        bad.write_bytes(data[:cut] + b"\xff" * -cut)
    with pytest.raises(ConfigError, match=r"bad\.parquet: cannot read it as Parquet .*; fix or remove it") as raised:
        analyze.analyze_files([whole, bad])
    assert "\n" not in str(raised.value)
