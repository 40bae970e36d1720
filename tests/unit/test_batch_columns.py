"""A job's power samples and its ranks' compute taken over a batch's columns: the same state as one row at a
time (the definitions these replaced, written here as the reference), whatever repeats, gaps and orders."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streams.engine.compute import KEEP_STEPS, RankCompute
from streams.engine.detectors.coherence import POWER_SAMPLES
from streams.engine.job import MAX_POWER_GAP_S, JobState
from streams.engine.options import EngineConfig
from streams.engine.output import EngineOutput


def power_by_rows(rows: list[tuple[str, float, float]], last_seen: dict[str, tuple[float, float]],
                  nodes: dict[str, list[tuple[float, float]]]) -> list[tuple[float, float, float]]:  # fmt: skip
    held = []
    for entity, t, watts in rows:
        if not entity.startswith("device:"):
            nodes.setdefault(entity, []).append((t, watts))
        last = last_seen.get(entity)
        last_seen[entity] = (t, watts)
        if last is not None and 0 < t - last[0] <= MAX_POWER_GAP_S:
            held.append((last[0], t, last[1]))
    return held


def test_power_samples_of_a_batch_hold_as_row_by_row() -> None:
    rng = np.random.default_rng(7)
    job = JobState("j", EngineConfig())
    last_seen: dict[str, tuple[float, float]] = {}
    nodes: dict[str, list[tuple[float, float]]] = {}
    expected: list[tuple[float, float, float]] = []
    entities = np.array([f"device:d{i}" for i in range(6)] + ["node:n0", "rack:r0"], object)
    clock = 1000.0
    for _ in range(40):
        n = int(rng.integers(1, 20))
        entity = entities[rng.integers(0, len(entities), n)]  # repeats within a batch, in any order
        clock += float(rng.choice([1.0, 30.0, 90.0]))  # gaps over MAX_POWER_GAP_S are not counted
        time = clock + rng.uniform(-40.0, 40.0, n)  # a sample older than its entity's last: not counted
        time[rng.random(n) < 0.05] = math.nan
        value = rng.uniform(100.0, 700.0, n)
        cols: dict[str, Any] = {"entity": entity, "name": np.array(["power_w"] * n, object), "value": value,
                                "time": time}  # fmt: skip
        job.metrics(cols, EngineOutput())
        expected += power_by_rows(list(zip(entity.tolist(), time.tolist(), value.tolist(), strict=True)),
                                  last_seen, nodes)  # fmt: skip
    # (repr: the same floats, NaN times included)
    assert repr(job.window._power) == repr(expected) and len(expected) > 100
    assert repr(job._power) == repr(last_seen)
    kept = {e: v[-POWER_SAMPLES:] for e, v in nodes.items()}
    assert repr({e: list(q) for e, q in job.coherence._power.items()}) == repr(kept)


def compute_by_rows(c: dict[str, Any], per_step: dict[int, dict[int, float]],
                    position: dict[int, tuple[int, int]]) -> None:  # fmt: skip
    mask = c["op_class"] == "compute"
    steps, ranks = c["step"][mask], c["rank"][mask]
    key = steps * (int(ranks.max()) + 1) + ranks
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    sums = np.bincount(inverse.ravel(), c["duration"][mask])
    idx = np.flatnonzero(mask)[first]
    for step, rank, pp, tp, total in zip(c["step"][idx].tolist(), c["rank"][idx].tolist(), c["pp"][idx].tolist(),
                                         c["tp"][idx].tolist(), sums.tolist(), strict=True):  # fmt: skip
        per_rank = per_step.get(step)
        if per_rank is None:
            per_rank = per_step[step] = {}
            for old in sorted(per_step)[:-KEEP_STEPS]:
                del per_step[old]
        per_rank[rank] = per_rank.get(rank, 0.0) + total
        position[rank] = (pp, tp)


def test_compute_of_a_batch_adds_up_as_row_by_row() -> None:
    rng = np.random.default_rng(11)
    compute = RankCompute()
    per_step: dict[int, dict[int, float]] = {}
    position: dict[int, tuple[int, int]] = {}
    newest = 0
    for _ in range(60):
        n = int(rng.integers(1, 40))
        newest += int(rng.integers(0, 3))
        step = newest - rng.integers(0, 12, n)  # a step seen in an earlier batch, one too old to keep
        rank = rng.integers(0, 8, n)
        c = {"step": step, "rank": rank, "pp": rank // 4, "tp": rank % 2, "duration": rng.uniform(0.0, 1.0, n),
             "op_class": np.array(rng.choice(["compute", "comm"], n), object)}  # fmt: skip
        if not (c["op_class"] == "compute").any():
            continue
        compute.add(c)
        compute_by_rows(c, per_step, position)
        assert repr(compute._per_step) == repr(per_step)  # (the same floats, the steps in the same order)
        assert repr(compute._position) == repr(position)
