"""The what-if's native passes equal their definitions bit for bit.

- The candidates healed in one native call that finds their nodes in key columns (``dag.keyed_step_ends``,
  ``native/src/whatif.rs``): each row the mask ``key == value`` at its alternative durations
  (:class:`decompose.Rows`), on simulated steps, with int32 and int64 columns, values no node holds,
  candidates sharing a value, every node, NaN and infinite durations, over several blocks of rows; a whole
  what-if with and without it.
- The candidates' order by excess (numpy's stable sort, ``sorted``'s with NaN).
- The systematic evidence's sums per unit in one pass (``unit_deviations``).
- Each node's median over the other groups of its cell's medians in one call (``peer_medians_excluding``).
- A peer group's middle without the systematically slow units in one call (``PeerLayout.without`` of a
  ``PeerTypical``: no stage crossed).
- A step's ideal from peers and its evidence of systematic slowness in one call (``PeerLayout.at_ideal``).
- The systematic test's statistic over a window of steps in one call (``window_z``).
- A step's ideal from peers other than the slow ranks and links in one call (``PeerLayout.without``), and
  a snapshot's peers without their layout.
- Per node its replica, stage and link peers' medians, the ranks and replicas by excess, and each rank's last
  end, in one call each (``RoleLayout``)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from streams.engine import dag, ideal, systematic, whatif
from streams.engine.decompose import Rows
from streams.engine.ideal import Peers, PeerTypical
from streams.engine.stepgraph import Codebook, Floats, Ints, StepGraph, build
from streams.engine.systematic import NONE, Unsystematic
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns

pytestmark = pytest.mark.skipif(not dag.keyed_available, reason="native core without dag_keyed_step_ends")

ONE_RANK = 1  # a step of 16 ranks' spans with those of rank 0 only: every group alone
CASES = [("training-fabric", 16), ("training-slow-link", 32), ("realistic-slow-rank", 16)]
CASES += [("training-fabric", ONE_RANK)]


def _step(name: str, ranks: int, seed: int = 3) -> StepGraph:
    columns = op_columns(SCENARIOS[name](seed, max(ranks, 16), 12), 10)
    if ranks == ONE_RANK:
        columns = {k: v[columns["rank"] == 0] for k, v in columns.items()}
    return build(columns, Codebook(), Codebook(), {})


def _definition(g: StepGraph, alts: list[Floats], keys: list[Ints], rows: list[tuple[int, int, int]]) -> Floats:
    """Each row's mask ``key == value`` (every node for key -1) at its alternative, evaluated alone."""
    masks = [np.ones(g.nodes, bool) if k < 0 else keys[k] == v for _, k, v in rows]
    return np.array([Rows(g.intrinsic, alts[a], [m]).step_ends(g)[0] for (a, _, _), m in zip(rows, masks, strict=True)])


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_keyed_step_ends_equal_the_masks_rows(name: str, ranks: int) -> None:
    g = _step(name, ranks)
    rng = np.random.default_rng(11)
    alts = [g.intrinsic * rng.uniform(0.3, 1.5, g.nodes) for _ in range(3)]
    alts[1][rng.integers(0, g.nodes, 3)] = np.nan
    alts[2][rng.integers(0, g.nodes, 2)] = np.inf
    alts.append(np.where(rng.random(g.nodes) < 0.1, -0.01, alts[0]))  # (below 0: no maximum over the sinks)
    wide = rng.choice([-(10**12), 0, 7, 10**12], g.nodes).astype(np.int64)  # (a range wider than the column)
    keys = [g.rank.astype(np.int32), g.dp.astype(np.int64), g.pp, wide, np.where(g.rank % 2 == 0, -1, g.op)]
    rows = [(int(rng.integers(0, 4)), k, int(v)) for k in range(len(keys)) for v in np.unique(keys[k])]
    rows += [(0, 0, 0), (1, 0, 0), (2, -1, 0), (0, 0, ranks + 5), (3, 3, 10**12), (0, 4, -1), (1, 2, -3)]
    rows *= -(-3 * 128 // len(rows))  # (three blocks of rows or more, dag.rs BLOCK: each its own candidates)
    rng.shuffle(rows)
    a, k, v = ([row[i] for row in rows] for i in range(3))
    got = dag.keyed_step_ends(g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, alts, keys, a, k, v)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dag, "masked_available", False)  # (the definition's walk, not the native one shared with it)
        expected = _definition(g, alts, keys, rows)
    assert np.array_equal(got, expected, equal_nan=True)
    none = dag.keyed_step_ends(g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, alts, keys, [], [], [])
    assert none.shape == (0,)


def test_bad_candidates_are_refused() -> None:
    g = _step("training-fabric", 4)
    d, key = g.intrinsic, g.rank

    def call(alts: list[Floats], keys: list[Ints], a: list[int], k: list[int], v: list[int]) -> None:
        dag.keyed_step_ends(g.schedule, g.indptr, g.indices, g.floor, d, alts, keys, a, k, v)

    with pytest.raises(ValueError, match="in range"):
        call([d], [key], [1], [0], [0])
    with pytest.raises(ValueError, match="in range"):
        call([d], [key], [0], [1], [0])
    with pytest.raises(ValueError, match="in range"):
        call([d], [key], [0, 0], [0], [0])
    with pytest.raises(ValueError, match="one value per node"):
        call([d[1:]], [key], [0], [0], [0])
    with pytest.raises(ValueError, match="one value per node"):
        call([d], [key[1:]], [0], [0], [0])


@pytest.mark.parametrize(("name", "ranks"), [*CASES, ("training-slow-link", 128)])
def test_a_what_ifs_candidates_with_and_without_the_native_call(
    name: str, ranks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stages and links whose peers cannot heal some of their nodes, ops at a baseline, every node at it."""
    g = _step(name, ranks, seed=4)
    roles = whatif.Roles.of(g)
    rng = np.random.default_rng(2)
    baseline = g.intrinsic * rng.uniform(0.5, 1.1, g.nodes)
    ops = [f"op{i}" for i in range(int(g.op.max()) + 1)]
    for base in (None, baseline):
        native = whatif.what_if(g, "j", ops, base, roles)
        with monkeypatch.context() as m:
            m.setattr(dag, "keyed_available", False)
            m.setattr(dag, "masked_available", False)  # (the definition's rows in full)
            m.setattr(whatif, "_FUSED", False)
            m.setattr(systematic, "_DEVIATIONS", False)
            definition = whatif.what_if(g, "j", ops, base, roles)
        assert native.candidates == definition.candidates
        assert np.array_equal(native.counterfactual_s, definition.counterfactual_s, equal_nan=True)
        assert native.baseline_s == definition.baseline_s
        for w in (native, definition):  # (the ideal a row of the healed step ends: every node at its ideal, alone)
            assert w.pending is not None
            assert np.float64(w.structural.ideal_s).tobytes() == np.float64(w.pending.ideal_ends()[0]).tobytes()


def test_candidates_by_excess_are_sorteds_order() -> None:
    """Ranks and replicas by decreasing excess, ties by id, as ``sorted`` by ``(-excess, id)``: with ties,
    zeros of both signs, infinities, and NaN (sorted's own order among them)."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        excess = rng.choice([0.0, -0.0, 1.5, 2.0, np.inf, 3.25, np.nan], n, p=[0.2, 0.1, 0.2, 0.2, 0.1, 0.15, 0.05])
        ids = np.flatnonzero(rng.random(n) < 0.7)
        assert whatif._by_excess(ids, excess) == sorted(ids.tolist(), key=lambda i: (-excess[i], i))
    assert whatif._by_excess(np.zeros(0, np.int64), np.zeros(0)) == []


@pytest.mark.skipif(not systematic._DEVIATIONS, reason="native core without unit_deviations")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the definition on extreme values)
@pytest.mark.parametrize("positions", [0, 1, 7, 500])
def test_deviations_in_one_pass_equal_the_definitions_sums(positions: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per unit, the sums of signed and squared sizes, bit for bit: values and middles with NaN, infinities
    and zeros of both signs, unpaired positions, units int16, int32 and int64, groups of one."""
    rng = np.random.default_rng(positions)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, -2.5, 1e308])
    for trial in range(20):
        keys = np.where(
            rng.random(positions) < 0.1, -1, rng.integers(0, max(1, positions // (trial % 5 + 1)), positions)
        )
        unit = rng.integers(-1, 1 + trial % 9, positions)
        values = rng.lognormal(0.0, 0.5, positions)
        odd = rng.random(positions) < 0.15
        values[odd] = rng.choice(special, int(odd.sum()))
        middle = np.where(rng.random(positions) < 0.1, rng.choice(special, positions), values * 0.9)
        middle[rng.random(positions) < 0.1] = -0.0
        u = Unsystematic(keys, unit)
        if trial % 3 == 1:
            u.unit = u.unit.astype(np.int64)
        elif trial % 3 == 2:
            u.unit = u.unit.astype(np.int32)
        for mid in (None, middle):
            native = u.deviations(values, mid)
            with monkeypatch.context() as m:
                m.setattr(systematic, "_DEVIATIONS", False)
                definition = u.deviations(values, mid)
            for a, b in zip(native, definition, strict=True):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert np.array_equal(a.view(np.int64), b.view(np.int64))  # (bits: -0.0 apart from 0.0)


def _trial_values(g: StepGraph, rng: np.random.Generator, trial: int) -> Floats:
    """A step's durations, varied: odd trials with NaN, infinities and ties; trial 5 with -0.0 too."""
    values = g.intrinsic * rng.uniform(0.5, 1.5, g.nodes)
    if trial % 2:
        odd = rng.random(g.nodes) < 0.2
        values[odd] = rng.choice(np.array([np.nan, np.inf, 0.0, 1.0, 2.0]), int(odd.sum()))
    if trial == 5:
        values[rng.integers(0, g.nodes, 3)] = -0.0
    return values


class _Answers(list[bool]):
    """A native call that keeps what it answered (True: the values; False: left to the definition)."""

    def __init__(self, call: Callable[..., bool]) -> None:
        super().__init__()
        self.call = call

    def __call__(self, *args: object) -> bool:
        self.append(self.call(*args))
        return self[-1]


class _Spied:
    """A peer layout (native/src/peers.rs) whose calls keep what they answered (of a step's peers' ideal, or
    of a ``PeerTypical``)."""

    def __init__(self, peers: Peers | PeerTypical) -> None:
        owner = peers.ideal if isinstance(peers, Peers) else peers
        self.layout = owner.layout()
        self.at_ideal, self.without = _Answers(self.layout.at_ideal), _Answers(self.layout.without)
        owner._layout = self

    def units(self) -> tuple[int, int]:
        return self.layout.units()  # type: ignore[no-any-return]


@pytest.mark.skipif(not whatif._FUSED, reason="native core without peer_medians_excluding")
@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_peer_medians_excluding_in_one_call_equal_the_definitions(
    name: str, ranks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stages' and links' cells: as stepped, with NaN, infinities and ties among the values, with -0.0 (the
    definition's: a selection cannot place it), groups alone (NaN) and cells of unequal counts."""
    g = _step(name, ranks)
    roles = whatif.Roles.of(g)
    rng = np.random.default_rng(ranks)
    lone = np.where(g.pp == 0, 0, 1)  # (two groups: one cell's other group may hold nothing)
    only = 40 * ((lone == 0) & (g.op % 3 == 0))  # (keys group 0 only has: NaN)
    uneven = whatif.PeerCells.of(lone, np.where(rng.random(g.nodes) < 0.5, g.op, g.op + 1) + only, g.span >= 0)
    cases = [(roles.by_stage, g.pp), (roles.by_link, roles.link), (uneven, lone)]
    spy = _Answers(whatif.native.core.peer_medians_excluding)  # type: ignore[union-attr]
    monkeypatch.setattr(whatif.native.core, "peer_medians_excluding", spy)
    for trial in range(6):
        values = _trial_values(g, rng, trial)
        for at, groups in cases:
            spy.clear()
            native = whatif._peer_medians_excluding(at, values, groups)
            with monkeypatch.context() as m:
                m.setattr(whatif, "_FUSED", False)
                definition = whatif._peer_medians_excluding(at, values, groups)
            assert np.array_equal(native.view(np.int64), definition.view(np.int64))
            if trial != 5:  # (with -0.0 among them the call may leave the values to the definition)
                assert spy == ([True] if len(at.sel) else [])


def test_peer_medians_excluding_of_other_widths_are_the_definitions() -> None:
    """float32 or strided values, int16 or uint32 groups: computed (by the definition), never refused."""
    g = _step("training-slow-link", 16)
    roles = whatif.Roles.of(g)
    expected = whatif._peer_medians_excluding(roles.by_stage, g.intrinsic, g.pp)
    wide = np.repeat(g.intrinsic, 2)[::2]  # (the same values, not in one block)
    for values, groups in [(wide, g.pp), (g.intrinsic, g.pp.astype(np.int16)), (g.intrinsic, g.pp.astype(np.uint32))]:
        got = whatif._peer_medians_excluding(roles.by_stage, values, groups)
        assert np.array_equal(got.view(np.int64), expected.view(np.int64))
    narrow = whatif._peer_medians_excluding(roles.by_stage, g.intrinsic.astype(np.float32), g.pp)
    assert np.isnan(narrow).sum() == np.isnan(expected).sum()


@pytest.mark.skipif(not ideal._SLOW, reason="native core without peer_layout")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the definition on extreme values)
@pytest.mark.parametrize("positions", [1, 7, 500])
def test_the_peer_typical_without_slow_units_in_one_call_is_the_definitions(positions: int) -> None:
    """Each grouped position at its group's middle without the slow units' positions, its lower median where
    that is NaN (every member slow, a NaN among the middle values), work and transfers apart, bit for bit
    (:meth:`PeerTypical.typical`, as the typical replica takes it: its layout crosses no stage): with NaN,
    infinities, ties, units -1, groups of one; with -0.0 the call may leave it to the definition, never
    answer otherwise."""
    rng = np.random.default_rng(positions)
    special = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])
    for trial in range(30):
        keys = np.where(
            rng.random(positions) < 0.1, -1, rng.integers(0, max(1, positions // (trial % 5 + 1)), positions)
        )
        units = [rng.integers(-1, 2 + trial % 9, positions) for _ in range(2)]
        typical = PeerTypical(keys, rng.random(positions) < 0.7, *units)
        spy = _Spied(typical)
        values = rng.lognormal(0.0, 0.5, positions)
        if trial % 2:
            odd = rng.random(positions) < 0.15
            values[odd] = rng.choice(special, int(odd.sum()))
        if trial % 10 == 9:
            values[rng.integers(0, positions, 2)] = -0.0
        some = np.unique(rng.integers(0, 2 + trial % 9, 3))
        for slow in ((np.array([0]), NONE), (some, np.array([1])), (np.arange(10), np.arange(10)), (NONE, NONE)):
            spy.without.clear()
            native = typical.typical(values, slow)
            with pytest.MonkeyPatch.context() as m:
                m.setattr(ideal, "_SLOW", False)
                definition = typical.typical(values, slow)
            assert np.array_equal(native.view(np.int64), definition.view(np.int64)), (trial, slow)
            if not any(map(len, slow)):  # (nothing to leave out: each group's middle, no layout made for it)
                assert spy.without == []
                continue
            assert spy.without == [True] or (trial % 10 == 9 and spy.without == [False])


@pytest.mark.skipif(not ideal._SLOW, reason="native core without peer_layout")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the definition on extreme values)
@pytest.mark.parametrize(("name", "ranks"), [*CASES, ("realistic-slow-rank", 64)])  # (64: positions not paired)
def test_the_ideal_without_slow_ranks_and_links_is_the_definitions(
    name: str, ranks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's ideal from peers other than some ranks and links (:meth:`CrossStage.typical`), bit for bit: in
    one call (``PeerLayout.without``) and by the definition; with NaN, infinities, ties and -0.0 among the
    values (the call may leave -0.0 to the definition)."""
    g = _step(name, ranks)
    peers = Peers.of(g)
    rng = np.random.default_rng(ranks)
    links = int(max(0, peers.ideal.within.transfers.unit.max()))
    spy = _Spied(peers).without
    slows = [(np.array([2]), np.zeros(0, np.int64)), (np.array([0, 1, 2, 5]), np.arange(links + 1))]
    slows += [(np.zeros(0, np.int64), np.array([0])), (np.zeros(0, np.int64), np.zeros(0, np.int64))]
    slows += [(np.arange(int(peers.ideal.within.work.unit.max()) + 1), np.arange(links + 1))]  # (every unit)
    for trial in range(8):
        values = _trial_values(g, rng, trial)
        if trial > 5:  # (every value one of a few: groups all ties, infinities, a NaN)
            values = rng.choice(np.array([np.inf, 1e308, 1.0, np.nan][: 2 + trial % 2 * 2]), g.nodes)
        for slow in slows:
            spy.clear()
            native = peers.ideal.typical(values, slow)
            with monkeypatch.context() as m:
                m.setattr(ideal, "_SLOW", False)
                definition = peers.ideal.typical(values, slow)
            assert np.array_equal(native.view(np.int64), definition.view(np.int64)), (trial, slow)
            if trial not in (5, 7):
                assert spy == [True]


@pytest.mark.skipif(not ideal._FUSED, reason="native core without peer_layout")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the definition on extreme values)
@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_the_ideal_and_its_evidence_in_one_call_are_the_definitions(
    name: str, ranks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:meth:`Peers.at_ideal`'s ideal and sums per rank and link, bit for bit: as stepped, with NaN,
    infinities and ties among the values, with -0.0 or NaNs of two payloads (the call may leave either to the
    definition), on steps whose stages run the same work (its cross-stage minimum)."""
    g = _step(name, ranks)
    peers = Peers.of(g)
    rng = np.random.default_rng(ranks)
    spy = _Spied(peers).at_ideal
    payloads = np.array([0x7FF8000000000001, 0x7FF8000000000002], np.uint64).view(np.float64)
    crossed = 0
    for trial in range(12):
        values = _trial_values(g, rng, trial)
        if trial > 5:  # (NaNs of two payloads in a stage's groups: left to the definition, or its bits)
            values[g.pp == trial % 2] = np.where(rng.random(g.nodes) < 0.5, *payloads)[g.pp == trial % 2]
        spy.clear()
        native, evidence = peers.at_ideal(values)
        with monkeypatch.context() as m:
            m.setattr(ideal, "_FUSED", False)
            definition, expected = peers.at_ideal(values)
        assert np.array_equal(native.view(np.int64), definition.view(np.int64))
        for a, b in zip((*evidence[0], *evidence[1]), (*expected[0], *expected[1]), strict=True):
            assert a.dtype == b.dtype and np.array_equal(a.view(np.int64), b.view(np.int64))
        if trial < 5:
            assert spy == [True]
        crossed += int(np.count_nonzero(native[peers.ideal.crossed] < values[peers.ideal.crossed]))
    assert crossed or not len(peers.ideal.crossed)


def test_numpys_minimum_is_the_native_ideals() -> None:
    """The order ``PeerLayout`` takes of numpy's ``minimum`` (native/src/peers.rs ``minimum``): the first of
    two NaN, a NaN against a number, the second of 0.0 and -0.0."""
    nan1, nan2 = (np.array([bits], np.uint64).view(np.float64)[0] for bits in (0x7FF8000000000001, 0x7FF8000000000002))
    a = np.array([0.0, -0.0, nan1, 1.0, nan1, 1.0, 2.0] * 5)
    b = np.array([-0.0, 0.0, 1.0, nan2, nan2, 2.0, 1.0] * 5)
    expected = [b[0], b[1], nan1, nan2, nan1, 1.0, 1.0] * 5
    assert np.array_equal(np.minimum(a, b).view(np.int64), np.array(expected).view(np.int64))


@pytest.mark.skipif(not systematic._WINDOW, reason="native core without window_z")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the definition on extreme values)
@pytest.mark.parametrize("units", [0, 1, 16, 1000])
def test_the_windows_statistic_in_one_call_is_the_definitions(units: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per unit ``S / sqrt(Q)`` of the window's sums and the count of tested units, bit for bit: windows of 1 to
    ``WINDOW`` steps, sums that round differently in another order, zeros of both signs, NaN and infinities;
    a step of another length or dtype left to the definition."""
    rng = np.random.default_rng(units)
    answered: list[int | None] = []
    window_z = systematic.native.core.window_z  # type: ignore[union-attr]
    monkeypatch.setattr(systematic.native.core, "window_z", lambda *a: answered.append(window_z(*a)) or answered[-1])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
    for trial in range(20):
        steps = []
        for _ in range(1 + trial % systematic.WINDOW):
            s = rng.normal(size=units) * rng.choice([1e-3, 1.0, 1e16], units)
            q = np.where(rng.random(units) < 0.2, 0.0, s * s)
            odd = rng.random(units) < (0.1 if trial % 2 else 0.0)
            s[odd], q[odd[::-1]] = rng.choice(special, int(odd.sum())), rng.choice(special, int(odd.sum()))
            steps.append((s, q))
        if trial == 19 and units:
            steps[0] = (steps[0][0][:-1], steps[0][1][:-1])  # (a unit the first step has not)
        if trial == 18:
            steps[-1] = (steps[-1][0].astype(np.float32), steps[-1][1])  # (another dtype)
        if trial == 17:  # (another byte order: a step out of another machine's pickle)
            steps[0] = (steps[0][0].astype(steps[0][0].dtype.newbyteorder()), steps[0][1])
        answered.clear()
        z, tested = systematic._window(steps)
        with monkeypatch.context() as m:
            m.setattr(systematic, "_WINDOW", False)
            expected, count = systematic._window(steps)
        assert tested == count and np.array_equal(z.view(np.int64), expected.view(np.int64)), trial
        left = trial in (17, 18) or (trial == 19 and units)
        assert answered == ([None] if left else [tested])  # (None: the definition)


@pytest.mark.skipif(not ideal._FUSED, reason="native core without peer_layout")
def test_a_snapshots_peers_make_their_layout_again() -> None:
    """A step's peers in a snapshot (a pending decomposition, :mod:`structural`) without their native layout,
    made again at the next call: the same ideal, evidence, ideal and typical replica without slow units."""
    g = _step("realistic-slow-rank", 16)
    peers = Peers.of(g)
    values, slow = g.intrinsic, (np.array([2]), np.array([0]))
    made, without = peers.at_ideal(values), peers.ideal.typical(values, slow)
    replica = peers.replica.typical(values, slow)
    again = pickle.loads(pickle.dumps(peers))
    assert again.ideal._layout is None and again.replica._layout is None
    assert np.array_equal(again.replica.typical(values, slow), replica) and again.replica._layout is not None
    ideal_again, evidence = again.at_ideal(values)
    assert np.array_equal(ideal_again, made[0]) and np.array_equal(again.ideal.typical(values, slow), without)
    pairs = zip((*evidence[0], *evidence[1]), (*made[1][0], *made[1][1]), strict=True)
    assert all(np.array_equal(a, b) for a, b in pairs)


@pytest.mark.skipif(not whatif._ROLES, reason="native core without role_layout")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the definition on extreme values)
@pytest.mark.parametrize(("name", "ranks"), [*CASES, ("training-slow-link", 128)])
def test_the_roles_peers_and_ranking_in_one_call_are_the_definitions(name: str, ranks: int) -> None:
    """Per node its replica peers' median and its stage's and link's peers' (``RoleLayout.peers``), the ranks
    and replicas by their excess (``RoleLayout.ranked``),
    bit for bit: with NaN, infinities, ties and -0.0 among the values (the calls may leave -0.0, or a NaN
    excess, to the definitions)."""
    g = _step(name, ranks)
    roles = whatif.Roles.of(g)
    plain = replace(roles, layout=None)
    rng = np.random.default_rng(ranks)
    for trial in range(8):
        values = _trial_values(g, rng, trial)
        native = whatif._from_peers(g, roles, values)
        definition = whatif._from_peers(g, plain, values)
        for a, b in zip(native, definition, strict=True):
            assert np.array_equal(a.view(np.int64), b.view(np.int64)), trial
        peer_med = definition[0]
        assert whatif._ranked(g, roles, values, peer_med) == whatif._ranked(g, plain, values, peer_med), trial
        rows = np.empty(g.nodes), np.full(g.nodes, np.nan), np.full(g.nodes, np.nan)
        if trial % 2 == 0:  # (no NaN, no -0.0: each call answers)
            assert roles.layout.peers(values, *rows) and roles.layout.ranked(values, peer_med) is not None
    # replica peer groups all of one size (numpy's median, NaN if any is: not the middles of the others)
    for groups in [k for k in (1, 2, 3, 4) if g.nodes % k == 0]:
        position = whatif.Grouping(np.arange(g.nodes) % groups)
        assert position.uniform
        plain = replace(roles, position=position, layout=None)
        uniform = replace(plain, layout=whatif._role_layout(plain, g))
        for trial in range(4):
            values = _trial_values(g, rng, trial)
            for a, b in zip(whatif._from_peers(g, uniform, values), whatif._from_peers(g, plain, values), strict=True):
                assert np.array_equal(a.view(np.int64), b.view(np.int64)), (groups, trial)
