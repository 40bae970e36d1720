"""Job roll-ups from step summaries and power samples: the cost-per-output ratio to the job's first window,
money per output, energy per output, and the waste of re-runs and retries."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import orjson
import pytest

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.engine.engine import EngineConfig
from streams.engine.rollup import Rollup
from streams.testing import run_messages


def envelope(seq: int, kind: str, data: dict[str, Any], n: int) -> bytes:
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": "t", "seq": seq,
                         "columns": [{"kind": kind, "n": n, "data": data}]})  # fmt: skip


def steps(first: int, durations: list[float], start: float = 1000.0, **extra: Any) -> dict[str, Any]:
    n = len(durations)
    starts = [start + sum(durations[:i]) for i in range(n)]
    return {"job": "j", "step": list(range(first, first + n)), "start": starts, "duration": durations,
            "output_units": 100.0, "accelerators": 8, **extra}  # fmt: skip


def rollups(messages: list[bytes], price: float = 0.0) -> dict[str, list[dict[str, Any]]]:
    out = run_messages(messages, EngineConfig(rollup_steps=10, price_per_accel_hour=price))
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in out.audit:
        if r.type == "metrics_rollup":
            by_name.setdefault(r.body["name"], []).append(r.body)
    return by_name


def test_cost_per_output_is_read_against_the_first_window_and_priced() -> None:
    found = rollups([envelope(0, "step", steps(0, [1.0] * 10 + [1.5] * 10), 20)], price=3600.0)
    ratio = found["accel_s_per_output_ratio"]
    assert [r["mean"] for r in ratio] == pytest.approx([1.0, 1.5])
    assert [r["mean"] for r in found["cost_per_output"]] == pytest.approx([0.08, 0.12])  # 8 accel-s / 100 x 1/s


def test_power_samples_become_energy_per_output() -> None:
    power = {"entity": "node:n0", "name": "power_w", "value": 500.0, "job": "j",
             "time": [1000.0 + i for i in range(11)]}  # fmt: skip
    found = rollups([envelope(0, "metric", power, 11), envelope(1, "step", steps(0, [1.0] * 10), 10)])
    assert found["energy_j"][0]["total"] == pytest.approx(5000.0)  # 10 s at 500 W
    assert found["energy_j_per_output"][0]["mean"] == pytest.approx(5.0)  # over 1000 output units


def test_re_runs_and_retries_are_wasted_accelerator_seconds() -> None:
    first = envelope(0, "step", steps(0, [1.0] * 6), 6)
    rerun = envelope(1, "step", steps(4, [1.0] * 2, start=1006.0, status="restarted"), 2)  # steps 4, 5 again
    rest = envelope(2, "step", steps(6, [2.0] + [1.0] * 3, start=1008.0, attempts=[2, 1, 1, 1]), 4)
    waste = rollups([first, rerun, rest])["wasted_accel_s"]
    assert [(w["entity"], w["total"]) for w in waste] == [("cause:retry_rerun", pytest.approx(2 * 8 + 8.0))]


def test_a_restart_episode_is_one_finding_with_its_cost() -> None:
    first = envelope(0, "step", steps(0, [1.0] * 6), 6)
    rerun = envelope(1, "step", steps(4, [1.0] * 2, start=1006.0, status="restarted", attempts=2), 2)
    resumed = envelope(2, "step", steps(6, [1.0] * 2, start=1008.0), 2)
    out = run_messages([first, rerun, resumed], EngineConfig(rollup_steps=10))
    found = [r.body for r in out.audit if r.type == "finding" and r.body["kind"] == "restart_rerun"]
    assert len(found) == 1
    assert found[0]["cost"] == {"accel_s": 16.0} and found[0]["evidence"]["resumed_at"] == 6


def test_windows_end_after_n_steps_or_t_seconds_whichever_first() -> None:
    out = run_messages([envelope(0, "step", steps(0, [1.0] * 23), 23)], EngineConfig(rollup_steps=10,
                                                                                      rollup_window_s=4.5))  # fmt: skip
    windows = [(r.body["n"], r.body["window_start"]) for r in out.audit if r.body.get("name") == "step_s"]
    assert windows == [(5, 1000.0), (5, 1005.0), (5, 1010.0), (5, 1015.0), (3, 1020.0)]  # the last one partial
    many = rollups([envelope(0, "step", steps(0, [1.0] * 23), 23)])["step_s"]  # the default span: by steps
    assert [w["n"] for w in many] == [10, 10, 3]


def test_sampled_steps_close_windows_in_time() -> None:
    """Every 100th step traced (1 s steps): a window is 600 s of event time (the default), six traced steps."""
    data = {
        **steps(0, [1.0] * 20),
        "step": [100 * i for i in range(20)],
        "start": [1000.0 + 100 * i for i in range(20)],
    }
    out = run_messages([envelope(0, "step", data, 20)], EngineConfig())
    assert [r.body["n"] for r in out.audit if r.body.get("name") == "step_s"] == [6, 6, 6, 2]


def test_a_partial_window_is_emitted_when_the_job_is_evicted() -> None:
    """Job ``j`` stops after three steps; event time moves on (another job) past its idle period: its partial
    window comes out then, before the end of the input."""
    from audit.records import SourcePosition
    from streams.engine.engine import Engine
    from streams.pipeline import Processor

    processor = Processor(Engine(EngineConfig(job_idle_s=60.0)))
    processor.declare([SourcePosition("telemetry", 0, 0)])
    processor.telemetry(envelope(0, "step", steps(0, [1.0] * 3), 3), SourcePosition("telemetry", 0, 0))
    later = envelope(1, "step", {**steps(0, [1.0] * 600, start=2000.0), "job": "k"}, 600)  # past the lateness
    out = processor.telemetry(later, SourcePosition("telemetry", 0, 1))
    evicted = [r.body for r in out.audit if r.type == "metrics_rollup" and r.body["job"] == "j"]
    assert [(r["name"], r["n"]) for r in evicted if r["name"] == "step_s"] == [("step_s", 3)]


def test_waste_rollups_close_in_time_too_and_flush_their_partial_window() -> None:
    from streams.sim.scenarios import SCENARIOS

    telemetry = [v for kind, _, v in SCENARIOS["training-fabric-healthy"](1, 16, 24).run() if kind == "telemetry"]

    def allocated(config: EngineConfig) -> list[dict[str, Any]]:
        out = run_messages(telemetry, config)
        return [r.body for r in out.audit if r.type == "metrics_rollup" and r.body["name"] == "allocated_accel_s"]

    whole = allocated(EngineConfig())
    assert [w["n"] for w in whole] == [24]  # fewer steps than a window: the partial one, at the job's end
    timed = allocated(EngineConfig(rollup_window_s=2.0))
    step_s = whole[0]["max"] / 16  # the longest step
    assert len(timed) > 2 and sum(w["n"] for w in timed) == 24
    assert all(w["window_end"] - w["window_start"] < 2.0 + step_s for w in timed)
    assert all(b["window_start"] >= a["window_start"] + 2.0 for a, b in pairwise(timed))
    assert sum(w["total"] for w in timed) == pytest.approx(whole[0]["total"])


def test_the_step_time_roll_up_keeps_every_step_as_a_point_and_other_roll_ups_do_not() -> None:
    durations = [1.0 + 0.01 * i for i in range(15)]
    found = rollups([envelope(0, "step", steps(5, durations), 15)])
    windows = found["step_s"]
    points = [p for w in windows for p in w["points"]]
    assert [p[0] for p in points] == list(range(5, 20))
    assert [p[2] for p in points] == pytest.approx(durations)
    assert [p[1] for p in points] == pytest.approx([1000.0 + sum(durations[:i]) for i in range(15)])
    assert all(w["n"] == len(w["points"]) for w in windows)
    assert all("points" not in r for r in found["accel_s_per_output"])


def test_a_rollups_percentiles_are_numpys_each_on_its_own() -> None:
    """p50 and p99 from one np.percentile call are, to the bit, what a call for each gives (records keep them)."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        values = tuple((rng.random(int(rng.integers(1, 60))) * 10.0 ** rng.integers(-6, 6)).tolist())
        d = Rollup("j", "job/j", "step_s", 0.0, 1.0, values, sum(values)).as_dict()
        assert (d["p50"], d["p99"]) == (float(np.percentile(values, 50)), float(np.percentile(values, 99)))
