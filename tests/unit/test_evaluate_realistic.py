"""``driftlog eval`` in realistic mode: its scoring on hand-made engine records, and one small run."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from streams.sim.evaluate_realistic import RealisticRun, read_records, score_attribution, score_jobs, true_slowdowns
from streams.sim.realistic import REALISTIC


def truth_of(name: str, seed: int = 1) -> dict[str, Any]:
    scenario = REALISTIC[name](seed, 16, 40)
    list(scenario.run())
    return scenario.ground_truth(seed)


def at_step(truth: dict[str, Any], step: int) -> float:
    """An event time inside ``step``."""
    return truth["t0"] + sum(truth["step_time_s"][:step]) + 0.01


def finding(truth: dict[str, Any], fid: str, kind: str, step: int) -> tuple[str, str, dict[str, Any]]:
    return "finding", fid, {"id": fid, "kind": kind, "subjects": [f"job:{truth['job']}"], "end": at_step(truth, step)}


def cause(fid: str, rank: int, element: str, **estimates: Any) -> tuple[str, str, dict[str, Any]]:
    body = {"finding_id": fid, "rank": rank, "cause": element, "evidence": {"first_step": 10, "last_step": 30}}
    return "attribution", f"{fid}-{rank}", {**body, **estimates}


def rollup(truth: dict[str, Any], mean: float, n: int) -> tuple[str, str, dict[str, Any]]:
    return "metrics_rollup", f"r{mean}", {"entity": f"job:{truth['job']}", "name": "blocking_slowdown",
                                          "mean": mean, "n": n}  # fmt: skip


def test_scoring_of_hand_made_records() -> None:
    truth = truth_of("realistic-slow-rank-midrun")
    element = truth["causes"][0]["element"]
    onset = truth["causes"][0]["start_step"]
    heal, alone = true_slowdowns(truth, (10, 30))  # type: ignore[misc]
    assert heal > 1.05 and alone > 1.05
    run = RealisticRun("realistic-slow-rank-midrun", 1, truth)
    read_records(run, [
        finding(truth, "early", "structural_slowdown", onset - 2),  # before the onset: not the one judged
        cause("early", 1, "rank:llm-pretrain/0", slowdown=2.0),
        finding(truth, "s", "structural_slowdown", 20), cause("s", 2, "stage:llm-pretrain/0", slowdown=1.01),
        cause("s", 1, element, slowdown=heal * 1.02, slowdown_unhealed=alone * 0.97),
        finding(truth, "d", "step_time_drift", 25), cause("d", 1, "stage:llm-pretrain/1", slowdown=heal),
        finding(truth, "c", "critical_path_shift", 30),
        rollup(truth, 1.0, 10), rollup(truth, 2.0, 30),
    ])  # fmt: skip
    healthy = RealisticRun("realistic-healthy", 1, truth_of("realistic-healthy"))
    read_records(healthy, [finding(healthy.truth, "x", "critical_path_shift", 12)])
    healthy.modelled = [(0.985, 1.0), (1.0, 1.0), (1.01, 1.0), (1.05, 1.0)]
    rows = {(r["scenario"], r["finding"]): r for r in score_attribution([run, healthy])}
    assert set(rows) == {("realistic-slow-rank-midrun", k) for k in ("structural_slowdown", "step_time_drift")}
    structural = rows[("realistic-slow-rank-midrun", "structural_slowdown")]
    assert structural["found"] == 1.0 and structural["AC@1"] == 1.0
    assert structural["slowdown_err"] == pytest.approx(0.02) and structural["unhealed_err"] == pytest.approx(0.03)
    drift = rows[("realistic-slow-rank-midrun", "step_time_drift")]
    assert structural["named_first"] == "rank:1" and drift["named_first"] == "stage:1"
    assert drift["AC@1"] == 0.0 and drift["slowdown_err"] == pytest.approx(0.0) and drift["unhealed_err"] is None
    jobs = {r["scenario"]: r for r in score_jobs([run, healthy])}
    traced = truth["traced"]
    true_blocking = sum(a / i for a, i in zip(traced["actual_s"], traced["ideal_s"], strict=True)) / len(traced["step"])
    assert jobs["realistic-slow-rank-midrun"]["blocking_err"] == pytest.approx(abs(1.75 / true_blocking - 1))
    assert jobs["realistic-slow-rank-midrun"]["findings"] == 4
    assert jobs["realistic-slow-rank-midrun"]["false_findings"] is None
    kinds = "structural_slowdown:2 step_time_drift:1 critical_path_shift:1"
    assert jobs["realistic-slow-rank-midrun"]["finding_kinds"] == kinds
    assert jobs["realistic-healthy"]["false_findings"] == 1 and jobs["realistic-healthy"]["blocking_err"] is None
    assert jobs["realistic-healthy"]["within_2pct"] == 0.75
    assert jobs["realistic-healthy"]["model_err_p50"] == pytest.approx(0.005)


def test_absent_findings_score_zero_not_an_error() -> None:
    run = RealisticRun("realistic-slow-dp", 1, truth_of("realistic-slow-dp"))
    read_records(run, [])
    (row, _) = score_attribution([run])
    assert row["found"] == 0.0 and row["AC@1"] == 0.0 and row["slowdown_err"] is None


def test_eval_cli_realistic_mode_on_a_small_run(tmp_path: Any) -> None:
    import orjson

    from streams.cli import cli
    from streams.errors import ConfigError

    out = tmp_path / "eval.json"
    args = [
        "eval",
        "--mode",
        "realistic",
        "--scenario",
        "realistic-slow-stage",
        "--scenario",
        "training-fabric",
        "--seeds",
        "1",
        "--ranks",
        "16",
        "--steps",
        "40",
        "--throughput",
        "8",
        "--exporter",
        "sample_every=2",
    ]
    result = CliRunner().invoke(cli, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "realistic-slow-stage" in result.stdout and "training-fabric" not in result.stdout
    doc = orjson.loads(out.read_bytes())
    assert set(doc) == {"realistic"}
    (jobs,) = doc["realistic"]["jobs"]
    assert jobs["steps_modelled"] > 10  # 20 traced steps, analysed by the engine
    (speed,) = doc["realistic"]["throughput"]
    assert speed["ranks"] == 8 and speed["spans"] > 0 and speed["spans_per_s"] > 0
    bad = CliRunner().invoke(cli, ["eval", "--exporter", "batching=node"])  # refused before any run
    assert isinstance(bad.exception, ConfigError) and "batching must be one of" in str(bad.exception)


def test_two_overlapping_causes_are_scored_each_against_its_own_truth() -> None:
    truth = truth_of("realistic-slow-rank-and-dp")
    rank, replica = (c["element"] for c in truth["causes"])
    (rank_heal, rank_alone), (dp_heal, dp_alone) = (true_slowdowns(truth, (10, 30), i) or (0, 0) for i in (0, 1))
    assert rank_alone > 1.05 * rank_heal  # beside a slow replica, healing the rank alone buys little

    def scored(swapped: bool) -> dict[str, dict[str, Any]]:
        run = RealisticRun("realistic-slow-rank-and-dp", 1, truth)
        pairs = [(dp_heal, dp_alone), (rank_heal, rank_alone)]
        if swapped:  # an engine that confuses the two definitions
            pairs = [(b, a) for a, b in pairs]
        read_records(run, [
            finding(truth, "s", "structural_slowdown", 20),
            cause("s", 1, replica, slowdown=pairs[0][0], slowdown_unhealed=pairs[0][1]),
            cause("s", 2, rank, slowdown=pairs[1][0], slowdown_unhealed=pairs[1][1]),
        ])  # fmt: skip
        return {r["cause"]: r for r in score_attribution([run]) if r["finding"] == "structural_slowdown"}

    rows = scored(swapped=False)
    assert set(rows) == {"straggler_rank", "imbalanced_dp"}
    assert rows["imbalanced_dp"]["AC@1"] == 1.0 and rows["straggler_rank"]["AC@1"] == 0.0
    assert rows["imbalanced_dp"]["AC@causes"] == rows["straggler_rank"]["AC@causes"] == 1.0
    assert all(r["slowdown_err"] == pytest.approx(0) and r["unhealed_err"] == pytest.approx(0) for r in rows.values())
    swapped = scored(swapped=True)
    assert swapped["straggler_rank"]["slowdown_err"] > 0.05 and swapped["straggler_rank"]["unhealed_err"] > 0.05


def test_eval_runs_the_engine_with_the_driftlog_settings(tmp_path: Any) -> None:
    import orjson

    from streams.cli import cli

    out = tmp_path / "eval.json"
    args = ["eval", "--mode", "realistic", "--scenario", "realistic-slow-rank", "--seeds", "1", "--ranks", "16",
            "--steps", "40", "--throughput", "", "--exporter", "sample_every=2", "--json", str(out)]  # fmt: skip
    found = {}
    for threshold in ("", "0.9"):
        env = {"DRIFTLOG_STRUCTURAL_SLOWDOWN_THRESHOLD": threshold} if threshold else {}
        result = CliRunner().invoke(cli, args, env=env)
        assert result.exit_code == 0, result.output
        first = result.stdout.splitlines()[0]
        assert first == (f"engine settings: structural_slowdown_threshold={threshold}" if threshold
                         else "engine settings: defaults")  # fmt: skip
        rows = orjson.loads(out.read_bytes())["realistic"]["attribution"]
        found[threshold] = next(r["found"] for r in rows if r["finding"] == "structural_slowdown")
    assert found == {"": 1.0, "0.9": 0.0}  # a 1.3x slow rank is no 90% slowdown
