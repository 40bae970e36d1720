import json

import numpy as np
import orjson
import pytest

from streams.contract.envelope import FEW_ROWS, MAX_MESSAGE_BYTES, SampleBatch, decode_telemetry
from streams.contract.schema import TELEMETRY_SCHEMA

STEP = {"kind": "step", "job": "j", "step": 3, "start": 10.0, "duration": 1.5, "output_units": 4096}
OP = {"kind": "op", "job": "j", "step": 3, "rank": 5, "op": "allreduce", "op_class": "comm", "start": 10.0,
      "duration": 0.25, "group": "dp-0", "seq": 17}  # fmt: skip
METRIC = {"kind": "metric", "entity": "device:n1/gpu0", "name": "power_w", "value": 612.5, "time": 10.0}
TOPO = {"kind": "topology", "relation": "placed_on", "src": "rank:j/5", "dst": "device:n1/gpu0", "time": 0.0}


def env(*samples: object, schema: str = TELEMETRY_SCHEMA, **extra: object) -> bytes:
    doc = {"schema": schema, "source": "t", "sent_at": 1.0, "samples": list(samples), **extra}
    return json.dumps(doc).encode()  # the standard library writes integers beyond 64 bits, unlike orjson


def test_every_kind_decodes_with_defaults_and_unknown_fields_tolerated() -> None:
    out = decode_telemetry(env(STEP, OP, METRIC, TOPO, {**STEP, "step": 4, "future_field": [1, 2]}))
    assert out.rejects == []
    by_kind = {b.kind: b for b in out.batches}
    assert sorted(by_kind) == ["metric", "op", "step", "topology"]
    assert by_kind["step"].index.tolist() == [0, 4]
    assert by_kind["step"].columns["step"].tolist() == [3, 4]
    assert by_kind["step"].columns["attempts"].tolist() == [1, 1]  # default filled
    op = by_kind["op"].rows()[0]
    assert (op["rank"], op["microbatch"], op["peer"], op["dp"]) == (5, -1, -1, 0)
    assert out.total == 5 and out.count() == 5


@pytest.mark.parametrize(
    ("sample", "reason"),
    [
        ({**STEP, "duration": -1.0}, "out_of_range"),
        ({**STEP, "duration": 0}, "out_of_range"),
        ({**STEP, "duration": 1e12}, "out_of_range"),
        ({**STEP, "step": "3"}, "wrong_type"),
        ({**STEP, "step": 3.5}, "wrong_type"),
        ({**STEP, "step": True}, "wrong_type"),
        ({**STEP, "start": None}, "wrong_type"),
        ({k: v for k, v in STEP.items() if k != "job"}, "missing_field"),
        ({**STEP, "kind": "telepathy"}, "unknown_kind"),
        ({**OP, "op_class": "magic"}, "out_of_range"),
        ({**OP, "rank": 2**70}, "out_of_range"),
        ({**METRIC, "entity": ""}, "out_of_range"),
        ({**METRIC, "name": "x" * 300}, "out_of_range"),
        ("not an object", "wrong_type"),
    ],
)
def test_bad_samples_are_rejected_with_a_reason_and_good_ones_kept(sample: object, reason: str) -> None:
    out = decode_telemetry(env(STEP, sample, METRIC))
    assert out.count() == 2
    assert [(r.reason, r.index) for r in out.rejects] == [(reason, 1)]
    assert out.total == 3


def test_integral_floats_count_as_integers() -> None:
    out = decode_telemetry(env({**STEP, "step": 3.0}))
    assert out.rejects == [] and out.batches[0].columns["step"].tolist() == [3]


def test_nan_and_infinity_reject_only_their_sample() -> None:
    raw = (
        b'{"schema": "driftlog.telemetry/1", "source": "t", "samples": ['
        b'{"kind": "metric", "entity": "e", "name": "n", "value": NaN, "time": 1},'
        b'{"kind": "metric", "entity": "e", "name": "n", "value": -Infinity, "time": 1},'
        b'{"kind": "metric", "entity": "e", "name": "n", "value": 1e999, "time": 1},'
        b'{"kind": "metric", "entity": "e", "name": "n", "value": 2.5, "time": 1}]}'
    )
    out = decode_telemetry(raw)
    assert [(r.reason, r.index) for r in out.rejects] == [("not_finite", 0), ("not_finite", 1), ("not_finite", 2)]
    assert out.batches[0].columns["value"].tolist() == [2.5]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{nope", "malformed_json"),
        (b"\xff\xfe\x00", "malformed_json"),
        (b"[1, 2]", "not_an_envelope"),
        (env(STEP, schema="driftlog.telemetry/99"), "unknown_schema"),
        (b'{"schema": "driftlog.telemetry/1", "source": "t"}', "missing_field"),
        (b'{"schema": "driftlog.telemetry/1", "samples": []}', "missing_field"),
        (env(STEP, seq=-4), "wrong_type"),
        (b" " * (MAX_MESSAGE_BYTES + 1), "oversized"),
    ],
)
def test_bad_messages_are_rejected_whole(raw: bytes, reason: str) -> None:
    out = decode_telemetry(raw)
    assert out.batches == []
    assert [(r.reason, r.index) for r in out.rejects] == [(reason, None)]
    assert out.rejects[0].detail


def columnar(*batches: dict[str, object]) -> bytes:
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": "t", "columns": list(batches)})


def test_columnar_batches_broadcast_scalars_and_check_each_row() -> None:
    raw = columnar(
        {"kind": "metric", "n": 4, "data": {"entity": "device:g0", "name": "power_w", "time": [1, 2, 3, 4],
                                          "value": [300, 310.5, "hot", -1e30]}},
        {"kind": "step", "n": 2, "data": {"job": "j", "step": [1, 2], "start": [0.0, 1.0], "duration": 1.0}},
    )  # fmt: skip
    out = decode_telemetry(raw)
    assert [(r.reason, r.index) for r in out.rejects] == [("wrong_type", 2), ("out_of_range", 3)]
    metric, step = out.batches
    assert metric.index.tolist() == [0, 1] and metric.columns["value"].tolist() == [300.0, 310.5]
    assert metric.columns["entity"].tolist() == ["device:g0", "device:g0"]
    assert step.index.tolist() == [4, 5] and step.columns["duration"].tolist() == [1.0, 1.0]
    assert out.total == 6


def test_columns_of_the_wrong_length_reject_the_batch_only() -> None:
    raw = columnar(
        {"kind": "step", "n": 3, "data": {"job": "j", "step": [1, 2], "start": 0.0, "duration": 1.0}},
        {"kind": "step", "n": 1, "data": {"job": "j", "step": 9, "start": 0.0, "duration": 1.0}},
    )
    out = decode_telemetry(raw)
    assert [(r.reason, r.index) for r in out.rejects] == [("bad_columns", i) for i in range(3)]
    assert out.batches[0].index.tolist() == [3]


def test_fast_and_precise_paths_give_the_same_batches() -> None:
    from streams.contract.envelope import Decoded, _decode_rows

    samples = [OP, {**OP, "rank": 6}, {**OP, "rank": 7, "device": "g7"}]
    fast = decode_telemetry(env(*samples))
    precise = Decoded()
    _decode_rows(samples, precise)
    assert len(fast.batches) == len(precise.batches) == 1
    for name, values in precise.batches[0].columns.items():
        assert fast.batches[0].columns[name].tolist() == values.tolist(), name
        assert fast.batches[0].columns[name].dtype == values.dtype, name


@pytest.mark.parametrize("rows", [1, 3, FEW_ROWS, FEW_ROWS + 1, 200])
def test_a_batchs_time_bounds_are_numpys_min_and_max(rows: int) -> None:
    """Few rows are told as Python numbers, more by numpy: the same ends (NaN when one is NaN; infinities,
    ties and -0.0 among them; integer times as floats), and none for an empty batch or an object column."""
    rng = np.random.default_rng(rows)
    for _ in range(50):
        times = rng.choice(
            [0.0, -0.0, 1.5, -2.25, 1e300, np.inf, -np.inf, np.nan, 7.0], rows, p=[*[0.12] * 7, 0.02, 0.14]
        )
        batch = SampleBatch("metric", np.arange(rows), {"time": times})
        ends = batch.time_bounds()
        assert ends is not None
        want = (float(times.min()), float(times.max()))
        assert np.array(ends).tobytes() == np.array(want).tobytes(), (times, ends, want)  # (the zeros' signs too)
    assert SampleBatch("metric", np.arange(0), {"time": np.zeros(0)}).time_bounds() is None
    for few in (np.array([3, -2]), np.arange(FEW_ROWS + 5, dtype=np.uint32)):  # (integer times: as floats)
        ends = SampleBatch("op", np.arange(len(few)), {"start": few}).time_bounds()
        assert ends == (float(few.min()), float(few.max())) and all(type(e) is float for e in ends)
    assert SampleBatch("op", np.arange(2), {"start": np.array([1.0, None], object)}).time_bounds() is None
