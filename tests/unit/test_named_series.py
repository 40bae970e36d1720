"""Which series of a job's metrics go to the series-drift detector (``streams.engine.series``): the batch's
columns at once give what the rows one by one give."""

from __future__ import annotations

import numpy as np

from streams.engine import series


def columns(rows: list[tuple[str, str, float, float]]) -> tuple[np.ndarray, ...]:
    entity, name, value, time = zip(*rows, strict=True)
    return np.array(entity, object), np.array(name, object), np.array(value), np.array(time)


def test_the_columns_of_devices_give_the_series_of_their_rows() -> None:
    rng = np.random.default_rng(5)
    names = ["util", "power_w", "temperature_c", "latency_p99_s"]
    rows = [(f"device:n{i % 7}/gpu{i % 3}", names[i % 4], float(rng.random()), 100.0 + i // 5) for i in range(60)]
    got = series.of_metrics(*columns(rows))
    assert got == series._of_rows(rows)
    assert len(got[0]) == 45 and got[0][:2] == ["util@device:n0/gpu0", "power_w@device:n1/gpu1"]


def test_a_service_with_a_median_also_gets_its_tail_ratio() -> None:
    rows = [("service:chat", "latency_p50_s", 0.1, 10.0), ("service:chat", "latency_p99_s", 0.5, 10.0),
            ("device:n0/gpu0", "util", 0.7, 10.0)]  # fmt: skip
    keys, times, values = series.of_metrics(*columns(rows))
    assert keys == ["latency_p99_s@service:chat", "latency_p99_over_p50@service:chat", "util@device:n0/gpu0"]
    assert times == [10.0] * 3
    assert values == [0.5, 0.5 / 0.1, 0.7]
