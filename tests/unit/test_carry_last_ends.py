"""Each rank's last span end (streams/engine/carry.py ``last_end_per_rank``): the native pass equals its
definition, ``np.maximum.at`` over the spans, bit for bit: NaN (two payloads: the first one kept), infinities,
ties of -0.0 and 0.0 in both orders, ranks in no order, nodes that are not spans, a span of rank -1 (numpy's
index from the end), arrays out of a pickle, and a simulated step's graph."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from streams.engine import carry
from streams.engine.stepgraph import Codebook, build
from streams.sim.scenarios import SCENARIOS
from tests.conftest import require_native
from tests.unit.test_stepgraph import op_columns

OTHER_NAN = np.array([0x7FF8_0000_0000_0BAD], np.uint64).view(np.float64)[0]


def both(g: Any, ends: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray]:
    native = carry.last_end_per_rank(g, ends)
    with monkeypatch.context() as m, np.errstate(invalid="ignore"):  # (numpy warns of a NaN it keeps)
        m.setattr(carry, "_LAST_ENDS", False)
        return native, carry.last_end_per_rank(g, ends)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def test_native_last_ends_equal_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    require_native()
    assert carry._LAST_ENDS
    rng = np.random.default_rng(11)
    specials = np.array([np.nan, OTHER_NAN, np.inf, -np.inf, 0.0, -0.0, 1.5])
    for n, ranks in ((0, 1), (1, 1), (7, 3), (500, 9), (20_000, 300)):
        rank = rng.integers(0, ranks, n).astype(np.int32)
        span = np.where(rng.random(n) < 0.8, rng.integers(0, 50, n), -1).astype(np.int32)
        for p in (0.0, 0.01, 0.5):
            ends = np.where(rng.random(n) < p, rng.choice(specials, n), rng.choice([0.0, -0.0, 2.0], n))
            ends = np.where(rng.random(n) < 0.3, rng.normal(size=n), ends)
            native, definition = both(SimpleNamespace(rank=rank, span=span), ends, monkeypatch)
            assert same_bits(native, definition)
    for order in ([-0.0, 0.0], [0.0, -0.0], [np.nan, OTHER_NAN], [OTHER_NAN, np.nan], [1.0, np.nan, 2.0]):
        g = SimpleNamespace(rank=np.zeros(len(order), np.int32), span=np.zeros(len(order), np.int32))
        native, definition = both(g, np.array(order), monkeypatch)
        assert same_bits(native, definition), order
    g = SimpleNamespace(rank=np.array([1, -1, 0], np.int32), span=np.zeros(3, np.int32))
    native, definition = both(g, np.array([3.0, 5.0, 1.0]), monkeypatch)
    assert same_bits(native, definition) and native[1] == 5.0


def test_native_last_ends_on_a_step_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    require_native()
    g = build(op_columns(SCENARIOS["realistic-slow-rank"](2, 16, 12), 10), Codebook(), Codebook(), {})
    ends = g.evaluate(g.intrinsic[None, :])[0]
    for graph, row in ((g, ends), pickle.loads(pickle.dumps((g, ends)))):
        native, definition = both(graph, row, monkeypatch)
        assert np.isfinite(native).any() and same_bits(native, definition)
