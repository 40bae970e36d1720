"""The SDK's batching and the file importer's row mapping (no broker needed)."""

from pathlib import Path

import orjson
import pytest

from streams.client import Batcher, decision_message
from streams.contract.decision import decode_decision
from streams.contract.envelope import decode_telemetry
from streams.contract.sizing import fit
from streams.errors import ConfigError
from streams.produce import Mapping, Report, constant, parse_pairs, rows_of


def op(rank: int, job: str = "j", **extra: object) -> dict[str, object]:
    return {"job": job, "step": 1, "rank": rank, "op": "fwd", "op_class": "compute", "start": 1.0 + rank,
            "duration": 0.1, **extra}  # fmt: skip


def test_a_full_batch_becomes_one_columnar_message_with_scalars_for_constants() -> None:
    b = Batcher("src", max_samples=3)
    assert b.add("op", op(0)) == []
    assert b.add("op", op(1)) == []
    ((key, raw),) = b.add("op", op(2))
    assert key == "j" and len(b) == 0
    doc = orjson.loads(raw)
    assert (doc["source"], doc["seq"], "samples" in doc) == ("src", 0, False)
    data = doc["columns"][0]["data"]
    assert data["job"] == "j" and data["rank"] == [0, 1, 2] and data["microbatch"] == -1
    decoded = decode_telemetry(raw)
    assert decoded.rejects == [] and decoded.count() == 3


def test_jobs_are_batched_apart_and_numbered_per_source() -> None:
    b = Batcher("src", max_samples=100)
    b.add("op", op(0, job="a"))
    b.add("op", op(0, job="b"))
    b.add("step", {"job": "a", "step": 1, "start": 1.0, "duration": 2.0})
    drained = b.drain()
    assert [k for k, _ in drained] == ["a", "b"]
    assert [orjson.loads(v)["seq"] for _, v in drained] == [0, 1]
    assert [decode_telemetry(v).count() for _, v in drained] == [2, 1]
    assert b.drain() == []


def test_rows_missing_a_required_field_go_row_wise_so_the_service_can_name_it() -> None:
    b = Batcher("src", max_samples=100)
    b.add("op", op(0))
    b.add("op", {k: v for k, v in op(1).items() if k != "duration"})
    ((_, raw),) = b.drain()
    decoded = decode_telemetry(raw)
    assert [(r.reason, r.index) for r in decoded.rejects] == [("missing_field", 1)]
    assert decoded.count() == 1


def test_equal_but_differently_typed_values_are_not_folded_into_a_scalar() -> None:
    b = Batcher("src", max_samples=100)
    b.add("metric", {"entity": "e", "name": "n", "value": 1, "time": 1.0})
    b.add("metric", {"entity": "e", "name": "n", "value": True, "time": 1.0})
    ((_, raw),) = b.drain()
    assert [r.reason for r in decode_telemetry(raw).rejects] == ["wrong_type"]


def test_a_batch_over_the_byte_limit_goes_as_parts_that_each_fit_and_keep_every_row() -> None:
    b = Batcher("src", max_samples=10_000, max_bytes=20_000)
    for rank in range(2_000):
        b.add("op", op(rank, group=f"g{rank}"))
    b.add("op", {k: v for k, v in op(9_999).items() if k != "duration"})  # row-wise: the service names it
    messages = b.drain()
    assert len(messages) > 1 and all(len(v) <= 20_000 for _, v in messages)
    assert {k for k, _ in messages} == {"j"}
    docs = [orjson.loads(v) for _, v in messages]
    assert [d["source"] for d in docs] == ["src", *(f"src/part{i}" for i in range(1, len(docs)))]
    assert {d["seq"] for d in docs} == {0}
    decoded = [decode_telemetry(v) for _, v in messages]
    assert sum(d.count() for d in decoded) == 2_000
    assert [r.reason for d in decoded for r in d.rejects] == ["missing_field"]
    ranks = [int(r) for d in decoded for batch in d.batches for r in batch.columns["rank"]]
    assert sorted(ranks) == list(range(2_000))


def test_a_ready_made_envelope_that_fits_is_sent_as_it_is_and_one_that_does_not_is_split() -> None:
    small = orjson.dumps({"schema": "x", "source": "s", "seq": 1, "samples": [op(0)]})
    assert fit(small, 1_000) == [small]
    assert fit(b"not json" * 1_000, 100) == [b"not json" * 1_000]  # left for the service to refuse
    b = Batcher("s", max_samples=10_000, max_bytes=10**9)
    for rank in range(500):
        b.add("op", op(rank))
    ((_, big),) = b.drain()
    parts = fit(big, len(big) // 3)
    assert len(parts) >= 3 and all(len(p) <= len(big) // 3 for p in parts)
    assert sum(decode_telemetry(p).count() for p in parts) == 500


def test_decision_message_round_trips() -> None:
    key, raw = decision_message(id="d", time=1.0, controller="c", layer="power", action="cap", targets=["node:a"])
    decision, reject = decode_decision(raw)
    assert key == "c" and reject is None and decision is not None and decision["action"] == "cap"


def test_mapping_renames_scales_and_completes_rows() -> None:
    m = Mapping(rename={"dur_ms": "duration"}, scale={"duration": 0.001}, constants={"job": "x"}, kind="op")
    assert m.apply({"dur_ms": 250, "job": "keep"}) == {"duration": 0.25, "job": "keep", "kind": "op"}
    assert m.apply({"dur_ms": "n/a"})["duration"] == "n/a"  # left for the service to refuse


def test_option_parsing() -> None:
    assert parse_pairs(("a=b", "c=d=e"), "--map") == {"a": "b", "c": "d=e"}
    with pytest.raises(ConfigError, match="--map takes name=value"):
        parse_pairs(("nope",), "--map")
    assert (constant("12"), constant("true"), constant("llm-7b")) == (12, True, "llm-7b")


def test_unreadable_lines_are_reported_with_their_number(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n[1]\n{broken\n{"b": 2}\n')
    report = Report()
    assert list(rows_of(path, report)) == [{"a": 1}, {"b": 2}]
    assert report.unreadable_count == 2
    assert report.unreadable[0].endswith("x.jsonl:3: a JSON list, not an object")
    with pytest.raises(ConfigError, match="unknown file type"):
        list(rows_of(tmp_path / "x.csv", report))
