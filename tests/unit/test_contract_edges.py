"""Edges of the input: deep nesting is malformed JSON (never an internal error); a sample far in the future
is refused as such and does not make its source's later samples late."""

from __future__ import annotations

import numpy as np
import pytest

from streams.contract.admission import Admission
from streams.contract.columns import check_column
from streams.contract.decision import decode_decision
from streams.contract.envelope import SampleBatch, decode_telemetry
from streams.contract.schema import TELEMETRY_SCHEMA, FieldRule
from streams.formats.parquet import _breaks


def _nested(depth: int, obj: bool) -> str:
    return ('{"a":' * depth + "1" + "}" * depth) if obj else ("[" * depth + "1" + "]" * depth)


@pytest.mark.parametrize("depth", [1025, 5_000, 200_000])
@pytest.mark.parametrize("obj", [False, True])
@pytest.mark.parametrize("where", ["message", "sample", "unknown field of a sample"])
def test_deep_nesting_is_malformed_json(depth: int, obj: bool, where: str) -> None:
    nest = _nested(depth, obj)
    raw = {
        "message": nest,
        "sample": f'{{"schema":"{TELEMETRY_SCHEMA}","source":"s","samples":[{nest}]}}',
        "unknown field of a sample": f'{{"schema":"{TELEMETRY_SCHEMA}","source":"s","samples":[{{"kind":"metric",'
        f'"entity":"gpu:0","name":"util","value":1,"time":1,"extra":{nest}}}]}}',
    }[where].encode()
    decoded = decode_telemetry(raw)  # must not raise RecursionError
    assert [r.reason for r in decoded.rejects] == ["malformed_json"]
    assert decoded.count() == 0


@pytest.mark.parametrize("depth", [1025, 200_000])
def test_deeply_nested_decision_is_malformed_json(depth: int) -> None:
    raw = f'{{"id":"d","time":1,"controller":"c","layer":"power","action":"cap","parameters":{_nested(depth, True)}}}'
    decision, reject = decode_decision(raw.encode())
    assert decision is None and reject is not None and reject.reason == "malformed_json"


def _metric(times: list[float]) -> SampleBatch:
    n = len(times)
    return SampleBatch("metric", np.arange(n), {"time": np.asarray(times, dtype=np.float64)})


NOW = 1_767_225_600.0  # 2026-01-01


def test_a_far_future_sample_is_refused_and_does_not_poison_its_source() -> None:
    adm = Admission(allowed_lateness=300.0, max_future=3600.0)
    ((late, future),) = adm.screen("s", [_metric([NOW, 4_070_908_800.0])], now=NOW)  # the second: 2099
    assert future.tolist() == [False, True] and not late.any()
    ((late, future),) = adm.screen("s", [_metric([NOW + 1, NOW - 10])], now=NOW + 1)
    assert not late.any() and not future.any()  # not late: 2099 did not become the source's newest


def test_future_is_relative_to_the_reference_time_and_lateness_still_holds() -> None:
    adm = Admission(allowed_lateness=300.0, max_future=3600.0)
    adm.screen("s", [_metric([NOW])], now=NOW)
    ((late, future),) = adm.screen("s", [_metric([NOW + 3599, NOW + 3601, NOW - 301])], now=NOW)
    assert future.tolist() == [False, True, False]
    assert late.tolist() == [False, False, True]


def test_without_a_reference_time_nothing_is_future() -> None:
    adm = Admission()
    ((late, future),) = adm.screen("s", [_metric([NOW, 4_070_908_800.0])])
    assert not future.any() and not late.any()
    assert [m.tolist() for m in adm.late_mask("s", [_metric([NOW])])] == [[True]]  # the old API: late only


def test_each_bound_is_named_and_the_parquet_check_breaks_the_same_rows() -> None:
    rule = FieldRule("x", "number", True, minimum=-1.0, exclusive_minimum=0.0, maximum=5.0)
    values = [-2.0, 0.0, 0.5, 5.0, 7.0, -0.0]
    checked = check_column(rule, values)
    problems = {detail: mask.tolist() for mask, _, detail in checked.problems}
    assert problems == {
        "x: below minimum -1.0": [True, False, False, False, False, False],
        "x: must exceed 0.0": [True, True, False, False, False, True],
        "x: above maximum 5.0": [False, False, False, False, True, False],
    }
    arr = np.array(values)
    assert _breaks(rule, arr, arr).tolist() == [True, True, False, False, True, True]
    assert _breaks(rule, arr.min(), arr.max()) and not _breaks(rule, 0.5, 5.0)
    assert _breaks(FieldRule("y", "number", True), arr, arr) is False  # no bound: nothing breaks one
