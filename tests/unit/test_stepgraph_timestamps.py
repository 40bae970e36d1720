"""Step graphs on timestamps as real exporters write them (float32 step-relative, µs jitter, any order):
the same structure as the exact times, and a modelled step within 2% of the recorded one."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.engine.stepgraph import CHAIN, EPS, RECV, Codebook, StepGraph, build, quantile
from streams.formats.timestamps import as_exported, op_steps
from streams.sim.scenarios import SCENARIOS

Columns = dict[str, Any]


@functools.cache
def sim_steps(name: str) -> tuple[Columns, ...]:
    """The op span columns of each step of a small simulated run (16 ranks, 4 steps)."""
    return tuple(op_steps(value for kind, _, value in SCENARIOS[name](2, 16, 4).run() if kind == "telemetry"))


def graph(c: Columns) -> StepGraph:
    return build(c, Codebook(), Codebook(), {})


def modelled(g: StepGraph) -> float:
    return float(g.evaluate(g.intrinsic[None, :]).max())


def recv_edges(g: StepGraph) -> int:
    dst = np.repeat(np.arange(g.nodes), np.diff(g.indptr))
    return int(((g.kind[g.indices] == RECV) & (g.kind[dst] == CHAIN)).sum())


def by_span(g: StepGraph, values: Any) -> dict[int, float]:
    return {int(s): float(v) for s, v in zip(g.span, values, strict=True) if s >= 0}


SCENARIO_NAMES = ["training-fabric", "training-slow-stage", "training-imbalanced-dp"]


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(SCENARIO_NAMES),
    step=st.integers(0, 3),
    jitter_us=st.floats(0.0, 8.0),
    origin_s=st.sampled_from([1.0, 8.0, 32.0, 60.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_exported_timestamps_keep_the_structure_and_the_step_time(
    name: str, step: int, jitter_us: float, origin_s: float, seed: int
) -> None:
    clean = sim_steps(name)[step]
    exact = graph(clean)
    g = graph(as_exported(clean, jitter_us * 1e-6, origin_s, np.random.default_rng(seed)))
    assert g.signature == exact.signature
    assert recv_edges(g) == recv_edges(exact) > 0
    assert modelled(g) == pytest.approx(g.observed_s, rel=0.02)
    assert g.tolerance >= EPS


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(SCENARIO_NAMES), step=st.integers(0, 3), seed=st.integers(0, 2**32 - 1))
def test_reordering_spans_does_not_change_the_graph(name: str, step: int, seed: int) -> None:
    c = sim_steps(name)[step]
    order = np.random.default_rng(seed).permutation(len(c["start"]))
    a, b = graph(c), graph({k: v[order] for k, v in c.items()})
    assert a.signature == b.signature
    assert np.array_equal(a.kind, b.kind) and np.array_equal(a.rank, b.rank)
    assert by_span(b, b.intrinsic) == {
        int(np.flatnonzero(order == s)[0]): v for s, v in by_span(a, a.intrinsic).items()
    }
    assert modelled(a) == modelled(b)


def test_the_tolerance_follows_the_data() -> None:
    c = sim_steps("training-fabric")[1]
    assert graph(c).tolerance == EPS  # exact times: the least tolerance
    coarse = graph(as_exported(c, 0.0, 60.0, np.random.default_rng(0)))  # float32 at 60 s: 3.8 µs steps
    jittery = graph(as_exported(c, 20e-6, 1.0, np.random.default_rng(0)))
    assert 2 * 3.8e-6 <= coarse.tolerance < 20e-6
    assert jittery.tolerance > 20e-6  # twice the jitter's 90th percentile overlap
    assert jittery.signature == graph(c).signature


def test_a_legitimate_overlap_does_not_widen_the_tolerance_without_bound() -> None:
    cols = {
        "rank": [0, 0, 0],
        "dp": [0, 0, 0],
        "pp": [0, 0, 0],
        "tp": [0, 0, 0],
        "op": ["fwd", "allreduce", "bwd"],
        "op_class": ["compute", "comm", "compute"],
        "start": [0.0, 0.5, 1.0],
        "duration": [1.0, 2.0, 1.0],
        "microbatch": [0, -1, 0],
        "group": ["", "", ""],
        "seq": [-1, -1, -1],
        "peer": [-1, -1, -1],
    }  # fmt: skip  (an all-reduce on another stream overlaps both computes by 0.5 s and 1.5 s)
    g = graph({k: np.array(v, dtype=object if isinstance(v[0], str) else None) for k, v in cols.items()})
    assert g.tolerance <= 1e-3


def test_the_tolerances_quantile_is_numpys() -> None:
    rng = np.random.default_rng(9)
    for trial in range(2000):
        n = int(rng.integers(1, 60))
        x = rng.choice([1e-6, 2e-6, 3.5e-6], n) if trial % 2 else rng.exponential(1e-5, n)
        for q in (0.9, 0.5, 0.1, 0.0, 1.0, float(rng.random())):
            assert quantile(x, q) == float(np.quantile(x, q)), (x, q)
