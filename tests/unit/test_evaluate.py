"""The evaluation harness: baselines and scoring on known series, and one small end-to-end run."""

from streams.sim.evaluate import Run, adwin, evaluate, fixed_threshold, score


def test_fixed_threshold_alarms_after_three_slow_steps() -> None:
    series = [1.0] * 30 + [1.3] * 5
    assert fixed_threshold(series) == [32]
    assert fixed_threshold([1.0] * 30 + [1.1] * 20) == []


def test_adwin_finds_a_large_shift_and_not_a_flat_series() -> None:
    assert adwin([1.0] * 300) == []
    assert adwin([1.0] * 150 + [1.5] * 150)


def test_scoring() -> None:
    runs = [
        Run("x", 1, onset=10, truth_element="rank:j/3", alarms={"driftlog:straggler": [14]},
            named={"driftlog:straggler": [["rank:j/3"]]}, expected=("straggler",)),
        Run("x", 2, onset=10, truth_element="rank:j/5", alarms={"driftlog:straggler": [4, 30]},
            named={"driftlog:straggler": [["rank:j/5"], ["rank:j/4", "rank:j/5"]]}, expected=("straggler",)),
        Run("h", 1, onset=None, truth_element=None, alarms={"driftlog:straggler": [7]}),
    ]  # fmt: skip
    rows = {(r["scenario"], r["detector"]): r for r in score(runs)}
    row = rows[("x", "driftlog:straggler")]
    assert row["recall"] == 1.0
    assert row["median_delay_steps"] == 12  # 4 and 20
    assert row["alarms_before_onset"] == 1 and row["false_alarms_on_healthy"] is None
    assert row["precision"] == 2 / 3
    assert row["AC@1"] == 0.5  # judged on the first alarm at or after the onset
    assert row["AC@3"] == 1.0 and row["Avg@5"] == 0.9
    healthy = rows[("h", "driftlog:straggler")]
    assert healthy["false_alarms_on_healthy"] == 1 and healthy["recall"] is None


def test_small_end_to_end_run() -> None:
    rows = {(r["scenario"], r["detector"]): r
            for r in score(evaluate(["training-fabric", "training-fabric-healthy"], [1], 64, 60))}  # fmt: skip
    straggler = rows[("training-fabric", "driftlog:straggler")]
    assert straggler["recall"] == 1.0 and straggler["AC@1"] == 1.0
    drift = rows[("training-fabric", "driftlog:step_time_drift")]
    assert drift["AC@1"] == 1.0 and drift["slowdown_err"] < 0.05
    assert rows[("training-fabric-healthy", "driftlog:straggler")]["false_alarms_on_healthy"] == 0
