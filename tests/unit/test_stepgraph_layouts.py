"""A step graph built on a kept layout (streams/engine/layouts.py) equals the graph built from scratch, field
for field: on every step of simulated jobs (ideal and realistic, blocking transfers), with jitter small and
large, when the times reorder a rank's spans, and when they pair transfers otherwise (that step gets its
own layout)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pytest

from streams.engine import layouts
from streams.engine.stepgraph import Codebook, StepGraph, build
from streams.formats.timestamps import op_steps
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph_blocking import columns

Columns = dict[str, Any]


@functools.cache
def sim_steps(name: str) -> tuple[Columns, ...]:
    return tuple(op_steps(value for kind, _, value in SCENARIOS[name](3, 16, 6).run() if kind == "telemetry"))


def jittered(c: Columns, jitter_s: float, rng: np.random.Generator) -> Columns:
    """The same rows in the same order, each start and end moved by up to ``jitter_s``."""
    n = len(c["start"])
    start = np.asarray(c["start"], np.float64) + rng.uniform(-jitter_s, jitter_s, n)
    end = np.asarray(c["start"], np.float64) + c["duration"] + rng.uniform(-jitter_s, jitter_s, n)
    return {**c, "start": start, "duration": np.maximum(end - start, 0.0)}


def built(c: Columns, kept: list[layouts.Layout], monkeypatch: pytest.MonkeyPatch) -> StepGraph:
    with monkeypatch.context() as m:
        m.setattr(layouts, "_kept", kept)
        return build(c, Codebook(), Codebook(), {})


def assert_same(a: StepGraph, b: StepGraph) -> None:
    for f in dataclasses.fields(StepGraph):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        elif f.name != "schedule":
            assert x == y, f.name
    assert a.schedule.sources.tolist() == b.schedule.sources.tolist()
    assert [level.tolist() for level in a.schedule.levels] == [level.tolist() for level in b.schedule.levels]


NAMES = ["training-fabric", "training-slow-link", "training-cascade", "realistic-slow-rank", "realistic-slow-stage"]


@pytest.mark.parametrize("name", NAMES)
def test_a_kept_layout_gives_the_graph_built_from_scratch(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    kept: list[layouts.Layout] = []
    reused = 0
    for c in sim_steps(name):
        for jitter_s in (0.0, 1e-6, 30e-6, 2e-3):
            cols = jittered(c, jitter_s, rng)
            before = [(layout, layout.edges) for layout in kept]
            g = built(cols, kept, monkeypatch)
            assert_same(g, built(cols, [], monkeypatch))
            reused += any(layout.edges is not None and g.indptr is layout.edges.indptr for layout, _ in before)
    assert reused >= len(sim_steps(name))  # most steps did reuse a layout and its edges


@pytest.mark.parametrize("name", NAMES)
def test_a_layout_too_large_to_keep_its_plan_gives_the_same_graphs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``PLAN_NODES`` a kept layout makes its plan again for every step: the same graphs as one that
    keeps it (a plan is derived from the layout alone)."""
    steps = [jittered(c, 30e-6, np.random.default_rng(7)) for c in sim_steps(name)]
    keeping: list[layouts.Layout] = []
    with_plans = [built(c, keeping, monkeypatch) for c in steps]
    assert any(layout.plan is not None for layout in keeping)
    monkeypatch.setattr(layouts, "PLAN_NODES", 0)
    none: list[layouts.Layout] = []
    for c, g in zip(steps, with_plans, strict=True):
        assert_same(built(c, none, monkeypatch), g)
    assert none and all(layout.plan is None for layout in none)


def test_times_that_reorder_a_ranks_spans_give_the_graph_built_from_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    c = sim_steps("training-fabric")[2]
    kept: list[layouts.Layout] = []
    first = built(c, kept, monkeypatch)
    rank0 = np.flatnonzero(c["rank"] == 0)
    for i in range(0, 12, 3):
        a, b = rank0[np.argsort(c["start"][rank0])][[i, i + 1]]  # two consecutive spans of rank 0
        swapped = {**c, "start": c["start"].copy(), "duration": c["duration"].copy()}
        for k in ("start", "duration"):
            swapped[k][[a, b]] = c[k][[b, a]]
        g = built(swapped, kept, monkeypatch)
        assert_same(g, built(swapped, [], monkeypatch))
        assert not np.array_equal(g.span, first.span)


def transfers(recv_s: float) -> Columns:
    """Rank 0 sends to rank 1 twice (no microbatch: paired by order of midpoint); the first receive lasts
    ``recv_s`` (long enough, it ends after the second, which it then pairs with)."""
    return columns(
        (0, 0, "isend", "comm", 0.0, 1.0, -1, 1, "send", False),
        (0, 0, "isend", "comm", 2.0, 1.0, -1, 1, "send", False),
        (1, 1, "irecv", "comm", 0.5, recv_s, -1, 0, "recv", False),
        (1, 1, "irecv", "comm", 2.5, 0.7, -1, 0, "recv", False),
        (1, 1, "forward", "compute", 3.5, 1.0, -1, -1, "", False),
    )


def test_times_that_pair_transfers_otherwise_get_their_own_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[layouts.Layout] = []
    for recv_s in (1.0, 1.1, 5.5, 1.0, 5.4):
        g = built(transfers(recv_s), kept, monkeypatch)
        assert_same(g, built(transfers(recv_s), [], monkeypatch))
    assert len(kept) == 2  # one layout per pairing


def test_kept_layouts_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[layouts.Layout] = []
    monkeypatch.setattr(layouts, "KEEP_NODES", 10)
    for recv_s in (1.0, 5.5, 1.0):  # two layouts of 5 span nodes each, alternately
        built(transfers(recv_s), kept, monkeypatch)
    assert len(kept) == 2
    monkeypatch.setattr(layouts, "KEEP_NODES", 9)
    kept = []
    for recv_s in (1.0, 5.5):
        built(transfers(recv_s), kept, monkeypatch)
        assert len(kept) == 1  # the second one drops the first
    monkeypatch.setattr(layouts, "KEEP", 1)
    for name in NAMES[:2]:
        built(sim_steps(name)[0], kept, monkeypatch)
        assert len(kept) == 1  # the most recent, whatever its size


def test_a_kept_layout_is_compact_and_wide_values_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layout keeps its identity columns, the graph's node columns and its edges as int32 (half the memory
    of a large job's; node kinds as int8), the identity columns that are the graph's as views of its node
    columns (not twice), and a step whose columns do not fit int32 keeps them as int64, with the same values."""
    c = sim_steps("training-fabric")[0]
    kept: list[layouts.Layout] = []
    g = built(c, kept, monkeypatch)
    layout = kept[-1]
    assert all(col.dtype == np.int32 for col in layout.identity) and layout.edges is not None
    assert layout.edges.src.dtype == np.int32 and layout.edges.dst.dtype == np.int32
    assert all(g_col.dtype == np.int32 for g_col in (g.rank, g.dp, g.pp, g.tp, g.op, g.microbatch, g.peer))
    assert sum(col.base is not None for col in layout.identity) == 7  # rank, microbatch, peer, op, dp, pp, tp
    assert g.kind.dtype == np.int8 and g.span.dtype == np.int32  # (node kinds fit a byte; rows an int32)
    assert np.shares_memory(layout.identity[0], g.rank)
    assert_same(built(c, kept, monkeypatch), g)  # reused: the same graph
    wide = {**c, "dp": np.asarray(c["dp"], np.int64) + 2**40}
    wide_kept: list[layouts.Layout] = []
    w = built(wide, wide_kept, monkeypatch)
    assert all(col.dtype == np.int64 for col in wide_kept[-1].identity)
    assert np.array_equal(w.dp[w.span >= 0], g.dp[g.span >= 0].astype(np.int64) + 2**40) and w.dp.dtype == np.int64
    assert np.array_equal(w.rank, g.rank)
    assert_same(built(wide, wide_kept, monkeypatch), w)
