"""A step's draft by the native core (native/src/draft.rs) equals its definition (streams/engine/draft.py)
field for field, bit for bit: on every step of simulated jobs with jitter small and large (spans of a rank
that overlap, whose ends the launch search reads out of order), on a step built on its layout's plan, and on
a hand-made step whose rank's ends are out of order. A step with a blocking transfer whose peer is not
traced keeps the definition."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from streams.engine import draft, layouts, noderows, stepgraph, transfers
from streams.engine.codes import Codebook
from streams.engine.stepgraph import StepGraph, StepGraphError
from tests.conftest import require_native
from tests.unit.test_stepgraph_blocking import columns
from tests.unit.test_stepgraph_layouts import NAMES, assert_same, built, jittered, sim_steps


@pytest.fixture(autouse=True)
def native_core() -> None:
    require_native()
    if not draft.native_drafts:
        pytest.skip("driftlog_native was built before step_draft: make rebuilds it")


def both(c: dict[str, Any], kept: list[layouts.Layout], monkeypatch: pytest.MonkeyPatch) -> tuple[StepGraph, int]:
    """The graph with the native draft (on the layouts ``kept``), the number of native drafts it made, and
    asserts it equals the definition's (from scratch)."""
    calls = []
    native_draft = draft.native.core.step_draft  # type: ignore[union-attr]

    def counted(*args: Any) -> int:
        calls.append(1)
        return int(native_draft(*args))

    with monkeypatch.context() as m:
        m.setattr(draft.native.core, "step_draft", counted)
        g = built(c, kept, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(draft, "native_drafts", False)
        assert_same(g, built(c, [], monkeypatch))
    return g, len(calls)


@pytest.mark.parametrize("name", NAMES)
def test_the_native_draft_is_the_definitions(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    kept: list[layouts.Layout] = []
    steps = [jittered(c, jitter_s, rng) for c in sim_steps(name) for jitter_s in (0.0, 1e-6, 30e-6, 2e-3)]
    drafts = sum(both(c, kept, monkeypatch)[1] for c in steps)
    assert drafts >= len(sim_steps(name))  # (a step with an untraced blocking peer keeps the definition)


def test_ends_out_of_order_launch_sends_as_the_definition_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0's second span runs inside its first (ordered by midpoint, their ends are not): the search for
    the span a send follows reads them as numpy's does."""
    c = columns(
        (0, 0, "forward", "compute", 0.0, 10.0, 0, -1, "", False),
        (0, 0, "forward", "compute", 6.0, 2.0, 1, -1, "", False),
        (0, 0, "isend", "comm", 8.5, 0.5, 0, 1, "send", False),
        (0, 0, "forward", "compute", 9.0, 3.0, 2, -1, "", False),
        (0, 0, "isend", "comm", 9.5, 0.5, 1, 1, "send", False),
        (1, 1, "irecv", "comm", 8.5, 1.0, 0, 0, "recv", False),
        (1, 1, "forward", "compute", 9.7, 1.0, 0, -1, "", False),
        (1, 1, "irecv", "comm", 9.5, 1.0, 1, 0, "recv", False),
        (1, 1, "forward", "compute", 10.7, 1.0, 1, -1, "", False),
    )
    kept: list[layouts.Layout] = []
    g, drafts = both(c, kept, monkeypatch)
    assert drafts == 1 and np.isfinite(g.intrinsic).all()
    for shift in (0.25, 0.75, 1.5):  # the same layout: its plan
        moved = {**c, "start": c["start"] + np.where(c["rank"] == 0, 0.0, shift)}
        assert both(moved, kept, monkeypatch)[1] == 1


def test_the_native_identity_comparison_is_the_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """layouts.find's comparison of a step's identity columns in node order with a layout's, natively and
    by its definition: equal, a value differing anywhere, kept as int32 or int64; a column the native core
    cannot read (not contiguous, not int64) gets None, and the definition answers."""
    rng = np.random.default_rng(3)
    columns = [rng.integers(-5, 50, 40) for _ in range(4)]
    order = rng.permutation(40)
    for dtype in (np.int32, np.int64):
        kept = [c[order].astype(dtype) for c in columns]
        cases = [kept] + [[k if j != i else k.copy() for j, k in enumerate(kept)] for i in range(4)]
        for i, case in enumerate(cases[1:]):
            case[i][rng.integers(40)] += 1
        for case in cases:
            native = draft.native.core.same_in_order(columns, order, case)  # type: ignore[union-attr]
            with monkeypatch.context() as m:
                m.setattr(layouts, "native_layouts", False)
                assert native is not None and native == layouts._same(columns, order, case, [])
    assert draft.native.core.same_in_order([columns[0][::2]], order[:20], [kept[0][:20]]) is None  # type: ignore[union-attr]
    assert draft.native.core.same_in_order([columns[0].astype(np.int32)], order, [kept[0]]) is None  # type: ignore[union-attr]


def test_the_native_tolerance_is_the_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's tolerance natively and by its definition, on simulated steps with jitter from none to beyond
    the cap, and quantised times; a step with a time that is not finite keeps the definition."""
    rng = np.random.default_rng(5)
    tolerances = set()
    for c in sim_steps("realistic-slow-rank"):
        for jitter_s in (0.0, 1e-6, 30e-6, 2e-3):
            cols = jittered(c, jitter_s, rng)
            with monkeypatch.context() as m:
                m.setattr(stepgraph, "native_tolerance", False)
                g = built(cols, [], monkeypatch)
            assert built(cols, [], monkeypatch).tolerance == g.tolerance
            tolerances.add(g.tolerance)
    assert len(tolerances) > 4
    start, end = np.array([0.0, 1.0, np.inf]), np.array([1.0, 2.0, np.inf])
    native_tolerance = draft.native.core.step_tolerance  # type: ignore[union-attr]
    assert native_tolerance(start, end, np.arange(3), np.arange(2), (1e-6, 1e-3, 0.01)) is None


@pytest.mark.parametrize("wide", [False, True])
def test_the_native_row_sort_is_lexsorts(wide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows in node order natively and by np.lexsort: integer keys then a time, with ties, NaN and -0.0;
    first keys of a few values (bucketed) and spread wide (sorted whole)."""
    rng = np.random.default_rng(9)
    n = 500
    time = rng.choice([0.0, -0.0, 1.5, np.nan, 2.25, 3.0], n) + rng.choice([0.0, 0.0, 0.5], n)
    first = rng.integers(0, 8, n) * (2**40 if wide else 1) - 3
    keys = (first, rng.integers(0, 2, n), rng.integers(-1, 3, n))
    for rows in (np.arange(n), np.sort(rng.choice(n, 300, replace=False)), np.zeros(0, np.int64)):
        for k in (keys[:1], keys):
            native = layouts.lexsorted(rows, k, time)
            with monkeypatch.context() as m:
                m.setattr(layouts, "native_sorts", False)
                assert native.tolist() == layouts.lexsorted(rows, k, time).tolist()


def random_rows(rng: np.random.Generator, n: int, declared: bool) -> tuple[Any, ...]:
    """Arguments of :func:`noderows.rows` for ``n`` random spans: ties, NaN and -0.0 among the times; every
    op class, direction and declared direction (with ``declared``), blocking flags or none."""
    start = rng.choice([0.0, -0.0, 1.5, np.nan, 2.25, 3.0], n) + rng.choice([0.0, 0.0, 0.5], n)
    end = start + rng.choice([0.0, 0.25, 1.0, np.nan], n)
    ints = (
        rng.integers(0, 6, n), rng.integers(-1, 3, n), rng.integers(-1, 6, n), rng.integers(-2, 5, n),
        rng.integers(0, 5, n), rng.integers(0, 4, n) * 3, rng.integers(0, 4, n),
    )  # fmt: skip
    inferred = rng.integers(-1, 2, 5)
    given = rng.choice([transfers.INFER, -1, 0, 1, 2], n) if declared else None
    flag = rng.random(n) < 0.4 if rng.random() < 0.7 else None
    return start, end, tuple(np.asarray(i, np.int64) for i in ints), np.asarray(inferred, np.int64), given, flag


@pytest.mark.parametrize("declared", [False, True])
def test_the_native_step_rows_are_the_definitions(declared: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's rows in node order, directions, blocking, roles and collective numbers from the native core
    equal the definition's (sorted by np.lexsort), value and dtype, on random spans; the native core answers
    them (None only for columns it does not read: strided, a code out of range)."""
    rng = np.random.default_rng(15)
    core = draft.native.core
    assert core is not None
    for n in (1, 2, 57, 400):
        start, end, ints, inferred, given, flag = random_rows(rng, n, declared)
        answer = noderows.rows(start, end, ints, inferred, given, flag)
        with monkeypatch.context() as m:
            m.setattr(layouts, "native_sorts", False)
            expected = noderows.definition(start, end, ints, inferred, given, flag)
        for name in ("direction", "blocks", "role", "per_group", "order"):
            a, b = getattr(answer, name), getattr(expected, name)
            assert a.dtype == b.dtype and a.tolist() == b.tolist(), name
        assert answer.n_chain == expected.n_chain
        out = (np.empty(n, np.int8), np.empty(n, np.uint8), *(np.empty(n, np.int64) for _ in range(3)))
        flags = None if flag is None else flag.view(np.uint8)
        assert core.step_rows(start, end, list(ints), inferred, given, flags, out) == answer.n_chain
        if n > 1:  # (one value is contiguous at any stride)
            strided = [np.repeat(ints[0], 2)[::2], *ints[1:]]
            assert core.step_rows(start, end, strided, inferred, given, flags, out) is None
        unknown_op = [*ints[:4], ints[4] + 5, *ints[5:]]
        assert core.step_rows(start, end, unknown_op, inferred, given, flags, out) is None
        with pytest.raises(ValueError, match="shares memory"):  # (an output written over an input)
            core.step_rows(start, end, list(ints), inferred, given, flags, (*out[:4], ints[0]))
        misaligned = np.ndarray(n, np.int64, np.zeros(8 * n + 1, np.uint8).data, 1)  # (a packed record's)
        misaligned[:] = ints[3]
        moved = noderows.rows(start, end, (*ints[:3], misaligned, *ints[3 + 1 :]), inferred, given, flag)
        assert moved.order.tolist() == expected.order.tolist() and moved.n_chain == expected.n_chain


def test_a_malformed_plan_raises_when_it_is_made() -> None:
    """Each index of a plan (a simulated step's) moved out of what it indexes, or an array cut short, makes
    the plan's check raise ValueError (not a panic: the draft of each step on it reads it unchecked)."""
    kept: list[layouts.Layout] = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(layouts, "_kept", kept)
        stepgraph.build(sim_steps("training-fabric")[0], Codebook(), Codebook(), {})
    plan = kept[0].plan
    assert isinstance(plan, draft.Packed)
    check = draft.native.core.step_plan_check  # type: ignore[union-attr]
    check(plan.head, plan.arrays)  # (the plan as made)
    bounds = plan.head[3:]
    indexing = [k for k in INDEXING if bounds[k] < bounds[k + 1]]
    assert len(indexing) >= 14  # (the step has barriers, sends, receives and compute spans)
    for k in indexing:
        for bad in (-2, plan.n):
            arrays = plan.arrays.copy()
            arrays[bounds[k + 1] - 1] = bad
            with pytest.raises(ValueError, match="malformed plan"):
                check(plan.head, arrays)
    short = plan.head.copy()
    short[3 + 1] -= 1  # (the first array, one per chain position, one short; the second one longer)
    with pytest.raises(ValueError, match="malformed plan"):
        check(short, plan.arrays)
    huge = plan.head.copy()
    huge[2] = 2**63 - 1  # (barriers: a count whose sum with the others would wrap)
    with pytest.raises(ValueError, match="malformed plan"):
        check(huge, plan.arrays)
    arrays = plan.arrays.copy()
    prev, mi, has_prev = (arrays[bounds[k] : bounds[k + 1]] for k in (1, 5, 8))  # (views: Prev, Mi, HasPrev)
    member = int(np.flatnonzero(has_prev)[0])
    position = int(mi[member])
    prev[position] = -1  # (a barrier member said to follow a span, whose position now follows none...)
    other = int(np.flatnonzero(prev >= 0)[-1])
    for k in (14, 15, 16):  # (... and read as following one by no other array: Plain, After, Onto)
        following = arrays[bounds[k] : bounds[k + 1]]
        following[following == position] = other
    with pytest.raises(ValueError, match="barrier member without a previous span"):
        check(plan.head, arrays)


def test_a_malformed_plan_is_a_step_graph_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan inconsistent with its step fails the step as any bad input does (StepGraphError)."""
    made = draft.packed

    def corrupted(p: draft.Plan, mi: Any, barrier_of: Any) -> draft.Packed | None:
        return made(dataclasses.replace(p, after=p.after + p.n_chain), mi, barrier_of)

    monkeypatch.setattr(draft, "packed", corrupted)
    with pytest.raises(StepGraphError, match="malformed plan"):
        built(sim_steps("training-fabric")[0], [], monkeypatch)


# the planned arrays (native/src/draft.rs, `P`) that index nodes, positions or barriers
INDEXING = (1, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 21, 22, 23)
