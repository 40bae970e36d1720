"""Buffering by event time: a message's samples go to the epochs of their times, late ones are reported and
not buffered, and what drains is every buffered sample once, whatever the messages spanned."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streams.contract.envelope import SampleBatch
from streams.engine import timeline
from streams.engine.timeline import Timeline, canonical
from tests.conftest import require_native


def metrics(times: list[float]) -> SampleBatch:
    n = len(times)
    cols = {
        "entity": np.array([f"device:d{i}" for i in range(n)], dtype=object),
        "name": np.array(["util"] * n, dtype=object),
        "value": np.arange(n, dtype=np.float64),
        "time": np.array(times, dtype=np.float64),
    }
    return SampleBatch("metric", np.arange(n, dtype=np.int64), cols)


def buffered(timeline: Timeline) -> dict[int, list[float]]:
    return {
        k: sorted(t for part in e.parts.get("metric", []) for t in part.columns["time"].tolist())
        for k, e in timeline._epochs.items()
    }


def test_a_message_goes_to_the_epochs_of_its_samples() -> None:
    timeline = Timeline(lateness=100.0, epoch_s=1.0)
    one = metrics([5.25, 5.5, 5.0])
    timeline.add_samples("t/0", [one, metrics([6.5, 4.75, 6.0, 8.0])], offset=3)
    assert buffered(timeline) == {5: [5.0, 5.25, 5.5], 6: [6.0, 6.5], 4: [4.75], 8: [8.0]}
    assert timeline._epochs[5].parts["metric"][0] is one  # one epoch: the batch as it came
    assert timeline.newest("t/0") == 8.0
    assert timeline.pending() == {"t/0": 3}


def test_a_message_over_several_epochs_is_split_keeping_its_rows_order() -> None:
    """Each epoch gets the message's rows of its times in their order in the message; rows in time order are
    buffered as slices of the message's columns (views), others gathered once by one sort by epoch (each
    epoch's rows a slice of that one gather)."""
    timeline = Timeline(lateness=100.0, epoch_s=1.0)
    ordered, mixed = metrics([5.0, 5.5, 6.25, 6.0, 8.5]), metrics([7.5, 9.0, 7.25, 9.5, 7.0, 8.0])
    timeline.add_samples("t/0", [ordered, mixed])
    rows = {k: [p.columns["value"].tolist() for p in e.parts["metric"]] for k, e in timeline._epochs.items()}
    assert rows == {5: [[0.0, 1.0]], 6: [[2.0, 3.0]], 7: [[0.0, 2.0, 4.0]], 8: [[4.0], [5.0]], 9: [[1.0, 3.0]]}
    (six,) = timeline._epochs[6].parts["metric"]
    assert np.shares_memory(six.columns["time"], ordered.columns["time"])
    assert timeline._epochs[8].parts["metric"][1].index.tolist() == [5]
    seven, nine = timeline._epochs[7].parts["metric"][0], timeline._epochs[9].parts["metric"][0]
    gathered = seven.columns["value"].base
    assert gathered is not None and nine.columns["value"].base is gathered  # (one gather, sliced)
    assert not np.shares_memory(gathered, mixed.columns["value"])


def test_late_samples_are_reported_and_not_buffered() -> None:
    timeline = Timeline(lateness=0.0, epoch_s=1.0)
    timeline.add_samples("t/0", [metrics([10.5])])
    list(timeline.release())  # releases epochs below 10
    assert timeline.frontier == 10.0
    masks = timeline.add_samples("t/0", [metrics([9.5, 10.25, 3.0]), metrics([1.0, 2.0]), metrics([])])
    assert [m.tolist() for m in masks] == [[True, False, True], [True, True], []]
    assert buffered(timeline) == {10: [10.25, 10.5]}
    drained = [b for _, chunks in timeline.drain() for c in chunks for b in c.batches]
    assert sorted(t for b in drained for t in b.columns["time"].tolist()) == [10.25, 10.5]


def test_caught_up_channels_hold_nothing_back_but_channels_of_samples_hold_each_other() -> None:
    """A channel that is behind holds the watermark at its newest. Once every channel is caught up (a live
    worker keeping up in real time), a channel of decisions quiet for long (the last decision an hour ago) does
    not hold back every release; channels of samples still hold each other back, as a replay reading them
    would (so the live worker never declares late what a replay of the same range analyses)."""
    timeline = Timeline(lateness=2.0, epoch_s=1.0)
    timeline.declare(["telemetry/0", "decisions/0"])
    assert timeline.add_decision("decisions/0", {"id": "d", "time": 10.0})
    timeline.add_samples("telemetry/0", [metrics([float(t) for t in range(10, 41)])])
    assert timeline.watermark() == 8.0  # both may still deliver: the quiet one holds
    assert timeline.watermark(["decisions/0"]) == 38.0  # it is caught up: the other decides
    assert timeline.watermark(["decisions/0", "telemetry/0"]) == 38.0  # both: decisions do not hold
    released = [end for end, _ in timeline.release(["decisions/0", "telemetry/0"])]
    assert released == [float(k) for k in range(11, 39)]
    late = timeline.add_samples("telemetry/1", [metrics([30.0])])  # behind what was released: late
    assert late[0].tolist() == [True]
    skewed = Timeline(lateness=1.0, epoch_s=1.0)
    skewed.add_samples("telemetry/0", [metrics([1000.0])])
    skewed.add_samples("telemetry/1", [metrics([990.0])])
    assert skewed.watermark(["telemetry/0", "telemetry/1"]) == 989.0  # the oldest, as a replay


def test_a_consumed_epoch_gives_the_same_batch_and_lets_go_of_its_parts() -> None:
    """Released epochs are made canonical part by part as they are let go of: the same batch as from parts
    kept, none of the buffered arrays still referenced by the timeline, and the caller's batches unchanged."""
    parts = [metrics([3.5, 3.25, 3.75]), metrics([3.0, 3.5]), metrics([3.125])]
    kept = [SampleBatch(p.kind, p.index, dict(p.columns)) for p in parts]
    want = canonical("metric", kept)
    given = list(parts)
    got = canonical("metric", given, consume=True)
    assert given == []
    assert all(p.columns.keys() == want.columns.keys() for p in parts)  # (the batches themselves not changed)
    for name, values in want.columns.items():
        assert got.columns[name].tolist() == values.tolist()
    assert list(got.columns) == list(want.columns)
    one = [metrics([2.5, 2.0])]
    alone = canonical("metric", one, consume=True)
    assert one == [] and alone.columns["time"].tolist() == [2.0, 2.5]
    timeline = Timeline(lateness=0.0, epoch_s=1.0)
    timeline.add_samples("t/0", [metrics([3.5, 3.25]), metrics([3.0])])
    ((end, chunks),) = list(timeline.drain())
    assert end == 4.0 and not timeline._epochs
    assert [b.columns["time"].tolist() for c in chunks for b in c.batches] == [[3.0, 3.25, 3.5]]


def test_a_sample_on_an_epochs_edge_after_its_release_is_released_again_not_held() -> None:
    """With an epoch length that is not a power of two, a sample at exactly ``k * epoch_s`` (on time: not
    before the frontier) can fall in epoch ``k - 1``, one already released: that epoch is released again at
    the drain, never held back for good (review-series finding 1)."""

    def metric(t: float) -> SampleBatch:
        return SampleBatch("metric", np.arange(1), {"time": np.array([t]), "value": np.ones(1)})

    timeline = Timeline(lateness=0.0, epoch_s=0.1)
    timeline.add_samples("c", [metric(4.25)], 0)
    timeline.heard("c", 4.35)
    assert [len(chunk) for _, chunk in timeline.release()] == [1]
    edge = 43 * 0.1  # (4.3000000000000003: in epoch 42 by its floor division, released above)
    late = timeline.add_samples("c", [metric(edge)], 1)
    assert late is None or not any(mask.any() for mask in late)  # (on time: the frontier is 4.3)
    assert [len(chunk) for _, chunk in timeline.drain()] == [1]


def split(batch: SampleBatch, epoch_s: float) -> list[tuple[int, list[int], bytes, list[str]]]:
    """``_by_epoch``'s parts as (epoch, sample positions, times bit for bit, entities), with the native core
    where it answers."""
    times = np.asarray(batch.columns["time"], np.float64)
    return [
        (k, p.index.tolist(), p.columns["time"].tobytes(), p.columns["entity"].tolist())
        for k, p in timeline._by_epoch(batch, times, epoch_s)
    ]


EPOCH_CASES = [
    ([5.25, 5.5, 6.0, 7.5, 7.75], 1.0),  # in order: runs of the batch
    ([6.5, 4.75, 6.0, 8.0, 4.0, 6.25], 1.0),  # out of order: a stable sort by epoch
    ([-0.5, -0.0, 0.0, -1e-300, 2.5, -3.0], 1.0),
    ([0.1, 0.2, 0.3, 0.7, 0.30000000000000004, 0.6], 0.1),  # divisions rounded as numpy rounds them
    ([1e-320, 5e-324, 3.0], 1e-300),
    ([1.7e308, -1.7e308, 1.0], 1e-10),  # epochs beyond int64: the definition's
    ([1.0, float("nan"), 2.0], 1.0),
    ([1.0, float("inf"), 2.0], 1.0),
    ([9.2e18, 9.3e18, -9.3e18], 1.0),
    ([4.0], 1.0),
]


@pytest.mark.parametrize(("times", "epoch_s"), EPOCH_CASES)
def test_the_native_epoch_split_is_the_definitions(
    times: list[float], epoch_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's rows per epoch told by the native core (``native/src/epochs.rs``) are the definition's: the
    same epochs, rows and order; where an epoch is no plain int64 (NaN, infinity, beyond int64) it defers."""
    require_native()
    batch = metrics(times)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (numpy's cast of a NaN or an infinity)
        got = split(batch, epoch_s)
        monkeypatch.setattr(timeline, "_NATIVE_EPOCHS", False)
        want = split(batch, epoch_s)
    assert got == want


def test_the_native_epoch_split_agrees_on_random_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    require_native()
    rng = np.random.default_rng(3)
    batches = [metrics(list(rng.uniform(-50, 50, int(rng.integers(1, 400))))) for _ in range(200)]
    batches += [metrics(sorted(b.columns["time"].tolist())) for b in batches[:50]]
    steps = [float(rng.choice([1.0, 0.25, 0.1, 3.0, 7.5])) for _ in batches]
    answers: list[object] = []
    runs = timeline.native.core.epoch_runs  # type: ignore[union-attr]
    monkeypatch.setattr(timeline.native.core, "epoch_runs", lambda *a: answers.append(runs(*a)) or answers[-1])
    got = [split(b, s) for b, s in zip(batches, steps, strict=True)]
    assert len(answers) == len(batches) and None not in answers  # (the native core answered every one)
    monkeypatch.setattr(timeline, "_NATIVE_EPOCHS", False)
    assert got == [split(b, s) for b, s in zip(batches, steps, strict=True)]


def test_times_not_aligned_to_a_float64_are_left_to_the_definition() -> None:
    """Another exporter's column may sit at an odd address of its buffer: the native core cannot read it as
    float64, so it defers (no error), and the definition splits it."""
    require_native()
    raw = np.zeros(8 * 4 + 1, np.uint8)
    times = raw[1:].view(np.float64)  # (a view at an odd address)
    times[:] = [6.5, 4.75, 6.0, 8.0]
    assert not times.flags.aligned
    assert timeline.native.core.epoch_runs(times, 1.0) is None  # type: ignore[union-attr]
    batch = metrics(times.tolist())
    parts = list(timeline._by_epoch(batch, times, 1.0))
    assert [(k, p.columns["time"].tolist()) for k, p in parts] == [(4, [4.75]), (6, [6.5, 6.0]), (8, [8.0])]
