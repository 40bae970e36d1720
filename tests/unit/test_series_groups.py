"""Co-moving series are one finding (the members in its evidence), whatever the batching and order."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from streams.engine.detectors.changepoint import ChangePoint
from streams.engine.detectors.series_drift import SeriesDrift, series_key

DEVICES = [f"device:n{i // 8}/gpu{i % 8}" for i in range(24)]


def samples(seed: int = 1) -> list[tuple[str, float, float]]:
    """Utilisation of 24 devices sampled every 10 s: every device drops from ~0.9 to ~0.7 at t=600 but one,
    which rises to 1.0 (the straggler's own device), and the power of the first four steps up at t=900."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(130):
        t = 10.0 * i
        for d, device in enumerate(DEVICES):
            util = 0.9 if t < 600 else (1.0 if d == 5 else 0.7)
            rows.append((series_key(device, "util"), t, util + 0.01 * rng.standard_normal()))
            if d < 4:
                rows.append((series_key(device, "power_w"), t, (300 if t < 900 else 400) + 3 * rng.standard_normal()))
    return rows


def run(batches: list[list[tuple[str, float, float]]], every: int = 1) -> list[dict[str, Any]]:
    detector = SeriesDrift(job="llm", detector=ChangePoint(every=every))
    found = [f for b in batches for f in detector.update(*map(list, zip(*b, strict=True)))] + detector.flush()
    return sorted((f.as_dict() for f in found), key=lambda f: f["id"])


def batched(rows: list[tuple[str, float, float]], size: int, shuffle: int | None) -> list[list[Any]]:
    """In batches of ``size`` samples; with ``shuffle``, the series' order within each time is random."""
    if shuffle is not None:
        rng = random.Random(shuffle)
        by_time: dict[float, list[tuple[str, float, float]]] = {}
        for r in rows:
            by_time.setdefault(r[1], []).append(r)
        rows = [r for t in sorted(by_time) for r in rng.sample(by_time[t], len(by_time[t]))]
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def test_a_change_shared_by_many_devices_is_one_finding_with_its_members() -> None:
    found = run(batched(samples(), 28, None))
    util = [f for f in found if f["evidence"]["metric"] == "util"]
    down = [f for f in util if f["evidence"]["direction"] == "down"]
    up = [f for f in util if f["evidence"]["direction"] == "up"]
    assert len(down) == 1 and down[0]["subjects"] == ["job:llm"]
    members = down[0]["evidence"]["members"]
    assert [m["element"] for m in members] == sorted(d for i, d in enumerate(DEVICES) if i != 5)
    assert abs(down[0]["evidence"]["before"] - 0.9) < 0.02 and abs(down[0]["evidence"]["after"] - 0.7) < 0.02
    assert down[0]["start"] == 600.0
    assert [f["subjects"] for f in up] == [[DEVICES[5]]]  # alone: as it was found, on its device
    power = [f for f in found if f["evidence"]["metric"] == "power_w"]
    assert len(power) == 1 and len(power[0]["evidence"]["members"]) == 4 and power[0]["start"] == 900.0
    assert len(found) == 3


def test_groups_do_not_depend_on_batching_or_on_the_order_of_series() -> None:
    rows = samples(2)
    expected = run(batched(rows, 28, None))
    assert len(expected) >= 3
    for size, shuffle in ((5, 1), (100, 2), (len(rows), 3)):
        assert run(batched(rows, size, shuffle)) == expected, (size, shuffle)
    # tested on every 4th sample: which ones is fixed by the series' names, not by the order they came in
    every4 = run(batched(rows, 28, None), every=4)
    assert len(every4) >= 3
    for size, shuffle in ((5, 1), (len(rows), 3)):
        assert run(batched(rows, size, shuffle), every=4) == every4, (size, shuffle)


def test_groups_still_open_at_the_end_of_the_input_are_flushed() -> None:
    rows = [r for r in samples(3) if r[1] <= 700.0]  # the input ends a few samples after the drop
    detector = SeriesDrift(job="llm")
    during = detector.update(*map(list, zip(*rows, strict=True)))
    held = detector.flush()
    assert any(f.subjects == ("job:llm",) for f in during + held)
    assert detector.flush() == []


def test_series_kept_find_what_they_found_with_every_series() -> None:
    """``keep`` (a job's close: the series its last samples go to) changes nothing of what those find."""
    offset = {k: 0.1 * i for i, k in enumerate(dict.fromkeys(k for k, _, _ in samples()))}  # (each its own times)
    rows = [(k, t + offset[k], v) for k, t, v in samples()]
    head, tail = rows[: len(rows) // 2], rows[len(rows) // 2 :]
    kept = [series_key(d, "power_w") for d in DEVICES[:4]] + [series_key(DEVICES[5], "util")]
    last = [r for r in tail if r[0] in kept] + [(series_key("job:llm", "cost_per_output"), 1300.0, 1.0)]
    found = []
    for keep in (False, True):
        detector = SeriesDrift(job="llm", warn_on=("power_w",), detector=ChangePoint(every=2))
        detector.update(*map(list, zip(*head, strict=True)))
        if keep:
            detector.keep([*reversed(kept), "latency_p99_s@service:gone"])
        out = detector.update(*map(list, zip(*last, strict=True))) + detector.flush()
        found.append([f.as_dict() for f in out])
    assert found[0] == found[1]
    assert {f["kind"] for f in found[0]} >= {"series_drift"}
