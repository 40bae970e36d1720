"""The straggler detector on simulated fabrics with a known injected straggler (and on healthy ones)."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine.detectors.straggler import _waited
from streams.sim.scenarios import training_fabric
from streams.testing import run_messages


def findings(seed: int, ranks: int, steps: int, healthy: bool = False) -> tuple[list[dict[str, object]], object]:
    scenario = training_fabric(seed, ranks, steps, healthy=healthy)
    telemetry = [value for kind, _, value in scenario.run() if kind == "telemetry"]
    out = run_messages(telemetry)
    return [r.body for r in out.audit if r.type == "finding" and r.body["kind"] == "straggler"], scenario


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_injected_straggler_is_found_with_its_node(seed: int) -> None:
    found, scenario = findings(seed, 64, 45)
    cause = scenario.fabric.causes[0]  # type: ignore[attr-defined]
    assert len(found) == 1
    f = found[0]
    assert f["subjects"][0] == f"rank:llm-pretrain/{cause.target}"
    assert f["subjects"][1] == f"node:n{cause.target // 8}"
    truth = scenario.ground_truth(seed)  # type: ignore[attr-defined]
    onset_time = 1_767_225_600.0 + sum(truth["step_time_s"][: cause.start_step])
    assert onset_time <= f["start"] < onset_time + truth["step_time_s"][cause.start_step] * 2
    assert f["cost"]["accel_s"] > 0 and f["severity"] > 0.005


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_healthy_fabrics_raise_no_straggler(seed: int) -> None:
    found, _ = findings(seed, 64, 45, healthy=True)
    assert found == []


def test_same_input_same_findings() -> None:
    a, _ = findings(5, 32, 30)
    b, _ = findings(5, 32, 30)
    assert a == b and len(a) == 1


def test_a_flush_judges_what_is_open_and_the_histories_go_only_on_release() -> None:
    """A rank late in every collective from step 10: one episode, one finding, whether or not the detector was
    flushed in the middle; after ``release`` (a closed job) its histories are gone."""
    import numpy as np

    from streams.engine.detectors.straggler import CollectiveLateness

    def run(flush_at: int | None) -> tuple[CollectiveLateness, list[tuple[str, tuple[str, ...]]]]:
        rng = np.random.default_rng(6)
        d, found = CollectiveLateness("j"), []
        for step in range(120):
            arrivals = step + 0.001 * rng.random(8)
            if step >= 10:
                arrivals[5] += 0.02
            found += d.update(np.array(["g"] * 8, object), np.full(8, step), np.full(8, step), np.arange(8),
                              arrivals, np.full(8, 0.01))  # fmt: skip
            if step == flush_at:
                found += d.flush()
        found += d.flush()
        return d, [(f.kind, tuple(f.subjects)) for f in found]

    (kept, once), (_, flushed) = run(None), run(60)
    assert once == flushed == [("straggler", ("rank:j/5",))]
    assert kept._late
    kept.release()
    assert not kept._late and not kept._episodes


@pytest.mark.parametrize("members", range(2, 13))
def test_the_peers_wait_has_the_bits_of_numpys_sum(members: int) -> None:
    """A collective's wait for its last arrival, in Python numbers for a few members: numpy's sum of the gaps,
    bit for bit (arrivals of full-precision gaps, where the order of the additions shows)."""
    rng = np.random.default_rng(members)
    for _ in range(2000):
        arrivals = (rng.uniform(0.0, 1.0, members) * 10.0 ** rng.integers(-4, 3, members)).tolist()
        last = max(arrivals)
        assert _waited(arrivals, last) == float((last - np.asarray(arrivals)).sum())
