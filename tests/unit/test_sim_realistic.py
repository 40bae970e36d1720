"""The realistic training mode: what a real exporter sends, and a ground truth with both slowdown definitions."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest

from streams.contract.envelope import decode_telemetry
from streams.contract.sizing import MAX_MESSAGE_BYTES, split_by_size
from streams.sim.base import envelope
from streams.sim.exporter import Exporter
from streams.sim.realistic import REALISTIC, RealisticScenario, realistic_layout
from streams.sim.scenarios import SCENARIOS
from streams.sim.training import Cause, TrainingFabric


def spans_of(scenario: RealisticScenario) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(op rows, step rows, message sources) from the raw messages (unknown fields such as p2p included)."""
    ops: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    sources = []
    for kind, _, value in scenario.run():
        doc = orjson.loads(value)
        if kind != "telemetry" or doc["source"].startswith("topology/"):
            continue
        sources.append(doc["source"])
        for batch in doc["columns"]:
            data = batch["data"]
            rows = [{k: (v[i] if isinstance(v, list) else v) for k, v in data.items()} for i in range(batch["n"])]
            (ops if batch["kind"] == "op" else steps).extend(rows)
    return ops, steps, sources


def test_per_rank_messages_of_sampled_steps_from_one_traced_tensor_rank_per_stage() -> None:
    scenario = REALISTIC["realistic-slow-rank"](2, 64, 23)
    ops, steps, sources = spans_of(scenario)
    lay = scenario.fabric.layout
    traced = sorted({(r["step"]) for r in ops})
    assert traced == [0, 5, 10, 15, 20]  # every 5th step: gaps in step numbers
    assert {r["tp"] for r in ops} == {0} and len({r["rank"] for r in ops}) == lay.dp * lay.pp
    assert len(sources) == len(traced) * lay.dp * lay.pp and all("/rank" in s for s in sources)
    assert [s["step"] for s in steps] == traced and {s["accelerators"] for s in steps} == {lay.ranks}
    truth = scenario.ground_truth(2)
    starts = {s["step"]: s["start"] for s in steps}
    assert starts[5] - starts[0] == pytest.approx(sum(truth["step_time_s"][:5]))  # untraced steps took time
    assert truth["traced"]["step"] == traced


def test_timestamps_are_jittered_float32_offsets_at_the_exporters_resolution() -> None:
    scenario = REALISTIC["realistic-healthy"](1, 16, 6)
    ops, steps, _ = spans_of(scenario)
    start_of = {s["step"]: s["start"] for s in steps}
    offsets = np.array([r["start"] - start_of[r["step"]] for r in ops])
    assert np.all(offsets > -1e-4)
    ticks = offsets / scenario.exporter.resolution_s
    assert np.abs(ticks - np.round(ticks)).max() < 0.1  # on the 4 µs grid (within float64 resolution at T0)
    exact = REALISTIC["realistic-healthy"](1, 16, 6, Exporter(jitter_s=0.0, resolution_s=0.0, float32=False))
    clean, _, _ = spans_of(exact)
    moved = np.array([a["start"] - b["start"] for a, b in zip(ops, clean, strict=True)])
    assert 0 < np.abs(moved).max() < 20e-6 and np.abs(moved).mean() > 0.5e-6  # µs jitter, not more


def test_batched_blocking_p2p_spans_include_the_wait_for_the_peer() -> None:
    healthy, _, _ = spans_of(REALISTIC["realistic-healthy"](3, 32, 6))
    scenario = REALISTIC["realistic-slow-stage"](3, 32, 6)
    slow, _, _ = spans_of(scenario)
    stage = scenario.fabric.causes[0].target
    link = scenario.fabric.link_s
    for rows in (healthy, slow):
        p2p = [r for r in rows if r["p2p"]]
        assert {r["p2p"] for r in p2p} == {"send", "recv", "sendrecv"}
        assert all(r["blocking"] and r["peer"] >= 0 and r["microbatch"] == -1 for r in p2p)
        assert all(r["op"] == r["p2p"] for r in p2p)  # the op name alone does not say it is a transfer
        pp_of = {r["rank"]: r["pp"] for r in rows}
        assert all(abs(pp_of[r["peer"]] - r["pp"]) == 1 for r in p2p)
        assert min(r["duration"] for r in p2p if r["p2p"] == "sendrecv") > 0.5 * link  # the transfer at least

    def waited(rows: list[dict[str, Any]], pp: int) -> float:
        return sum(r["duration"] for r in rows if r["p2p"] == "sendrecv" and r["pp"] == pp)

    neighbours = [s for s in (stage - 1, stage + 1) if 0 <= s < scenario.fabric.layout.pp]
    assert all(waited(slow, s) > waited(healthy, s) + 0.01 for s in neighbours)  # waiting for the slow stage


def test_ground_truth_gives_both_definitions_from_the_model() -> None:
    scenario = REALISTIC["realistic-slow-dp"](4, 32, 30)
    list(scenario.run())
    truth = scenario.ground_truth(4)
    (cause,) = truth["causes"]
    fabric, c = scenario.fabric, scenario.fabric.causes[0]
    assert cause["start_step"] == 0 and cause["element"] == f"dp:llm-pretrain/{c.target}"
    steps = truth["traced"]["step"]
    for i, step in enumerate(steps):  # recomputed independently of the scenario's bookkeeping
        assert truth["traced"]["actual_s"][i] == fabric.simulate(step).duration
        assert truth["traced"]["ideal_s"][i] == fabric.simulate(step, healed=True).duration
        assert cause["healed_s"][i] == fabric.simulate(step, without=c).duration
        assert cause["ideal_except_s"][i] == fabric.simulate(step, only=c).duration
        noiseless = truth["traced"]["noiseless_ideal_s"][i]
        assert noiseless == replace(fabric, jitter=0.0).simulate(step, healed=True).duration
        assert noiseless < truth["traced"]["ideal_s"][i]  # noise alone makes the barriers wait a little
    actual, ideal = truth["traced"]["actual_s"], truth["traced"]["ideal_s"]
    assert cause["slowdown"] == pytest.approx(sum(actual) / sum(cause["healed_s"]))
    assert cause["slowdown_unhealed"] == pytest.approx(sum(cause["ideal_except_s"]) / sum(ideal))
    assert truth["blocking_slowdown"] == pytest.approx(sum(actual) / sum(ideal)) and truth["blocking_slowdown"] > 1.1


def test_the_two_definitions_differ_when_causes_overlap() -> None:
    """Healing only X and leaving only X unhealed agree for a lone cause, not beside another one."""
    fabric = TrainingFabric(realistic_layout(32), seed=1, blocking=True)
    rank, replica = Cause("straggler_rank", 0, 1.3, 0, 10), Cause("imbalanced_dp", 1, 1.3, 0, 10)
    fabric.causes += [rank, replica]
    actual, ideal = fabric.simulate(2).duration, fabric.simulate(2, healed=True).duration
    heal_only = actual / fabric.simulate(2, without=rank).duration
    only_unhealed = fabric.simulate(2, only=rank).duration / ideal
    assert heal_only < 1.02 < only_unhealed  # replica 1 holds every barrier: healing the rank barely helps


def test_causes_from_step_zero_and_mid_run_and_a_spread_over_every_replica() -> None:
    for name, onset in (("realistic-slow-link", 0), ("realistic-slow-rank-midrun", 10), ("realistic-spread-dp", 0)):
        scenario = REALISTIC[name](1, 32, 30)
        list(scenario.run())
        truth = scenario.ground_truth(1)
        (cause,) = truth["causes"]
        assert cause["start_step"] == onset and cause["slowdown"] > 1.03, name
        ratio = np.array(truth["step_time_s"]) / np.array(truth["counterfactual_step_time_s"])
        assert np.all(ratio[onset:] > 1.01) and np.all(ratio[:onset] == 1.0), name
    assert cause["element"] == "spread:llm-pretrain/dp"
    fabric = scenario.fabric  # the spread varies every replica's compute, step by step
    compute = fabric.simulate(4).compute[("F", 0, 0)][:, 0]
    assert np.ptp(compute / fabric.simulate(4, healed=True).compute[("F", 0, 0)][:, 0]) > 0.1


@pytest.mark.parametrize("exporter", ["batching=stage,shuffle=true", "batching=step", "traced_tp=all,sample_every=1",
                                      "p2p_microbatch=1,jitter_s=0", "delay=2"])  # fmt: skip
def test_exporter_variations_carry_the_same_step_times(exporter: str) -> None:
    """Each variation records the same simulated run: batching and order change messages, not spans."""
    base, _, _ = spans_of(REALISTIC["realistic-slow-stage"](2, 16, 11))
    varied, summaries, sources = spans_of(REALISTIC["realistic-slow-stage"](2, 16, 11, Exporter.parse(exporter)))
    key = ("rank", "step", "op", "start")
    if "traced_tp=all" in exporter:
        assert {r["tp"] for r in varied} == {0, 1} and any(r["op"] == "tp_sync" for r in varied)
        assert len({r["step"] for r in varied}) == 11
    elif "jitter_s=0" in exporter:
        assert [r["op"] for r in varied] == [r["op"] for r in base]
        mb = [(r["microbatch"], nxt["microbatch"]) for r, nxt in itertools.pairwise(varied)
              if r["p2p"] and nxt["op_class"] == "compute" and r["rank"] == nxt["rank"]]  # fmt: skip
        assert mb and all(a == b for a, b in mb)
    else:
        assert sorted(tuple(r[k] for k in key) for r in varied) == sorted(tuple(r[k] for k in key) for r in base)
        assert len(sources) < len({(r["rank"], r["step"]) for r in base}) or "batching" not in exporter
    if "delay" in exporter:  # odd replicas' spans of step 0 come after even replicas' of step 5
        order = [(r["dp"] % 2, r["step"]) for r in varied]
        assert order.index((1, 0)) > order.index((0, 5))
    if "shuffle" in exporter:
        assert [tuple(r[k] for k in key) for r in varied] != sorted(tuple(r[k] for k in key) for r in varied)
    assert len(summaries) == len({r["step"] for r in varied})


def test_exporter_options_are_checked() -> None:
    assert Exporter.parse("traced_tp=all, sample_every=3") == Exporter(sample_every=3, traced_tp=None)
    for bad in (
        "batching=node",
        "sample_every=0",
        "sample_every=all",
        "nope=1",
        "float32=maybe",
        "jitter_s",
        "delay=-1",
    ):
        with pytest.raises(ValueError, match="exporter"):
            Exporter.parse(bad)
    with pytest.raises(ValueError, match="traced_tp"):
        REALISTIC["realistic-healthy"](1, 16, 5, Exporter(traced_tp=2))
    with pytest.raises(ValueError, match="multiple of"):
        REALISTIC["realistic-healthy"](1, 10, 5)


def test_split_by_size_uses_the_fewest_parts_that_fit() -> None:
    def encode(part: int, parts: int, lo: int, hi: int) -> bytes:
        return orjson.dumps({"part": part, "rows": list(range(lo, hi))})

    whole = encode(0, 1, 0, 1000)
    assert split_by_size(1000, encode, limit=len(whole)) == [whole]
    parts = split_by_size(1000, encode, limit=len(whole) // 3)
    assert all(len(p) <= len(whole) // 3 for p in parts) and 3 < len(parts) <= 5
    assert sum(len(orjson.loads(p)["rows"]) for p in parts) == 1000
    assert len(split_by_size(2, encode, limit=1)) == 2  # a row that cannot fit goes alone


@pytest.mark.parametrize(("name", "exporter"), [("training-fabric", None), ("realistic-slow-rank", "batching=step")])
def test_messages_fit_kafkas_default_size_at_1024_ranks(name: str, exporter: str | None) -> None:
    """A default producer and broker accept every message (they were 1.36 MB per stage before)."""
    build = SCENARIOS[name] if exporter is None else lambda s, r, n: REALISTIC[name](s, r, n, Exporter.parse(exporter))
    scenario = build(1, 1024, 2)
    sizes, samples = [], 0
    for kind, _, value in scenario.run():
        sizes.append(len(value))
        if kind == "telemetry":
            decoded = decode_telemetry(value)
            assert decoded.rejects == []
            samples += decoded.count()
    assert max(sizes) <= MAX_MESSAGE_BYTES and samples == scenario.samples
    assert max(sizes) > MAX_MESSAGE_BYTES / 4  # split where needed, not into crumbs


def test_simulate_takes_an_exporter_variation_for_realistic_scenarios_only(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from streams.cli import cli
    from streams.errors import ConfigError

    args = ["simulate", "--ranks", "16", "--steps", "6", "--out", str(tmp_path), "--exporter", "batching=step"]
    result = CliRunner().invoke(cli, [*args, "--scenario", "realistic-slow-dp"])
    assert result.exit_code == 0, result.output
    sources = [orjson.loads(line)["source"] for line in (tmp_path / "telemetry.jsonl").read_bytes().splitlines()]
    assert sources[1:] == ["trainer/llm-pretrain/all"] * 2  # steps 0 and 5, one message each
    refused = CliRunner().invoke(cli, [*args, "--scenario", "training-fabric"])
    assert isinstance(refused.exception, ConfigError) and "realistic" in str(refused.exception)


def test_a_16k_rank_topology_is_split_into_messages_that_fit() -> None:
    from streams.sim.emit import topology
    from streams.sim.sizing import sized_envelopes
    from streams.sim.training import Layout

    batches = topology(TrainingFabric(Layout.for_ranks(16384)), "big")
    messages = sized_envelopes("topology/big", 0, batches)
    assert len(messages) > 1 and max(len(m) for m in messages) <= MAX_MESSAGE_BYTES
    decoded = [decode_telemetry(m) for m in messages]
    assert all(d.rejects == [] for d in decoded) and len({d.source for d in decoded}) == len(messages)
    rows = [(r["relation"], r["src"], r["dst"]) for d in decoded for b in d.batches for r in b.rows()]
    expected = []
    for b in batches:
        relation = b["data"]["relation"]
        relations = relation if isinstance(relation, list) else [relation] * b["n"]
        expected += list(zip(relations, b["data"]["src"], b["data"]["dst"], strict=True))
    assert rows == expected  # every row once, in order
    small = topology(TrainingFabric(Layout.for_ranks(64)), "small")
    assert sized_envelopes("topology/small", 0, small) == [envelope("topology/small", 0, small)]
