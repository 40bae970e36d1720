"""Job roll-ups from step summaries and power samples: the cost-per-output ratio to the job's first window,
money per output, energy per output, and the waste of re-runs and retries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.engine.engine import EngineConfig
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
