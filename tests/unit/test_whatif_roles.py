"""A structure's peer roles (kept per graph signature) are the step's own: a step whose graph has the same
edges and node kinds but other node columns (an op renamed on one rank, replicas numbered otherwise) is
analysed as it would be alone, with or without a restart in between (review of session 9, finding 1)."""

from __future__ import annotations

import pickle
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from streams import analyze
from streams.engine.stepgraph import PROGRAM_KINDS, SEND, Codebook, build
from streams.engine.steps import JobSteps, StepReport
from streams.engine.whatif import Roles
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns


@cache
def _steps() -> tuple[dict[str, Any], dict[str, Any]]:
    scenario = SCENARIOS["training-fabric"](3, 16, 12)
    return op_columns(scenario, 9), op_columns(scenario, 10)


def _renamed(c: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's compute spans under another op name (the same class: the same graph)."""
    c = {k: v.copy() for k, v in c.items()}
    op = c["op"].astype(object)
    op[(c["rank"] == 0) & (c["op_class"] == "compute")] = "fwd_recompute"
    c["op"] = op
    return c


def _dp_swapped(c: dict[str, Any]) -> dict[str, Any]:
    """Replicas 0 and 1 numbered the other way round (each rank's spans as they were)."""
    c = {k: v.copy() for k, v in c.items()}
    dp = c["dp"]
    c["dp"] = np.where(dp == 0, 1, np.where(dp == 1, 0, dp))
    return c


def _report(job: JobSteps, step: int, c: dict[str, Any]) -> StepReport:
    job.add(np.full(len(c["rank"]), step, np.int64), c)
    (report,) = job.flush()
    return report


def _same(a: StepReport, b: StepReport) -> None:
    wa, wb = a.whatif, b.whatif
    assert [c.element for c in wa.candidates] == [c.element for c in wb.candidates]
    np.testing.assert_array_equal(wa.counterfactual_s, wb.counterfactual_s)
    np.testing.assert_array_equal(wa.ideal_rank_ends(), wb.ideal_rank_ends())
    assert (wa.step_s, wa.structural.ideal_s, wa.baseline_s) == (wb.step_s, wb.structural.ideal_s, wb.baseline_s)
    da, db = wa.decomposed(), wb.decomposed()
    assert (da.ideal_s, da.elements, da.contains) == (db.ideal_s, db.elements, db.contains)
    np.testing.assert_array_equal(da.healed_s, db.healed_s)
    np.testing.assert_array_equal(da.unhealed_s, db.unhealed_s)
    np.testing.assert_array_equal(a.positions, b.positions)


@pytest.mark.parametrize("changed", [_renamed, _dp_swapped])
@pytest.mark.parametrize("restart", [False, True])
def test_a_step_of_the_same_signature_with_other_node_columns_is_analysed_as_alone(changed: Any, restart: bool) -> None:
    first, second = _steps()
    second = changed(second)
    ops, groups, cache_ = Codebook(), Codebook(), {}
    assert build(first, ops, groups, cache_).signature == build(second, ops, groups, cache_).signature
    job = JobSteps("j")
    _report(job, 9, first)
    if restart:
        job = pickle.loads(pickle.dumps(job))
    _same(_report(job, 10, second), _report(JobSteps("j"), 10, second))


def test_roles_are_kept_for_a_step_of_the_same_node_columns() -> None:
    first, second = _steps()
    job = JobSteps("j")
    _report(job, 9, first)
    (structure,) = job._structures.values()
    roles = structure.roles
    _report(job, 10, second)
    assert structure.roles is roles


def test_roles_fit_equal_columns_and_no_others() -> None:
    first, _ = _steps()
    g = build(first, Codebook(), Codebook(), {})
    roles = Roles.of(g)
    assert roles.fits(g) and roles.fits(replace(g, rank=g.rank.copy(), floor=g.floor.copy()))  # equal, not the same
    op = g.op.copy()
    op[0] += 1
    assert not roles.fits(replace(g, op=op))
    floor = g.floor.copy()
    floor[np.flatnonzero(np.isfinite(floor))[0]] = -np.inf  # a node that starts at an observed time no longer
    assert not roles.fits(replace(g, floor=floor))


def test_a_step_of_transfers_alone_is_analysed(tmp_path: Path) -> None:
    """A step whose spans are all asynchronous transfers (no compute span: a sampled trace of comms) is
    analysed, not a crash of the file's analysis that loses the step's spans (review of session 10)."""
    span = {"kind": "op", "job": "j", "dp": 0, "tp": 0, "op_class": "comm", "duration": 0.002, "microbatch": 0,
            "seq": -1, "p2p": "", "blocking": False, "device": "", "step": 8}  # fmt: skip
    rows = [
        {**span, "rank": 0, "pp": 0, "op": "send", "start": 100.0, "peer": 1},
        {**span, "rank": 1, "pp": 1, "op": "recv", "start": 100.001, "peer": 0},
    ]
    path = tmp_path / "comms.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
    out = analyze.analyze_files([path])
    assert not out.dead_letters
    assert any(r.type == "graph_snapshot" for r in out.audit), sorted({r.type for r in out.audit})


@pytest.mark.parametrize("name", ["training-fabric", "training-slow-link", "training-imbalanced-dp"])
def test_roles_hold_each_ranks_replicas_and_stages_and_the_groups_present(name: str) -> None:
    g = build(op_columns(SCENARIOS[name](3, 16, 12), 9), Codebook(), Codebook(), {})
    roles = Roles.of(g)
    ranks = np.unique(g.rank[g.rank >= 0]).tolist()
    assert len(ranks) == 16
    for r in ranks:
        assert roles.replicas_of.at(r) == set(g.dp[g.rank == r].tolist())
        assert roles.stages_of.at(r) == set(g.pp[g.rank == r].tolist())
    stages, links = roles.present
    assert stages == sorted(set(g.pp[np.isin(g.kind, PROGRAM_KINDS)].tolist())) and len(stages) > 1
    assert links == sorted(set(roles.link[(g.kind == SEND) & (roles.link >= 0)].tolist()))
