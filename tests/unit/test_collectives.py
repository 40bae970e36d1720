"""Collectives complete whatever the batching: a collective is judged once its step is complete, so its
members all count however the samples were split into messages (per rank and step, per stage and step, per
step, all at once), and even when a rank issues its next collective of the group before a peer arrived at
the previous one (asynchronous collectives: two per group and step, as real exporters report them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.testing import run_messages

DP, PP, TP = 4, 2, 2
T0 = 1_767_225_600.0
STEP_S = 0.5
Span = dict[str, Any]


def rank_of(d: int, p: int, t: int) -> int:
    return (d * PP + p) * TP + t


def job(steps: int, slow: int | None, every: int = 1, seed: int = 1) -> list[Span]:
    """Op spans of a toy job: per rank and step a forward pass, then two asynchronous collectives of its
    data-parallel group (issued 1 ms apart; each ends 10 ms after its last member arrived). Rank ``slow``
    computes 30 ms longer from the first step; step numbers go ``0, every, 2·every, ...``."""
    rng = np.random.default_rng(seed)
    spans: list[Span] = []
    for i in range(steps):
        step, t0 = i * every, T0 + i * STEP_S
        for p in range(PP):
            for t in range(TP):
                group = f"dp-pp{p}-tp{t}"
                ranks = [rank_of(d, p, t) for d in range(DP)]
                compute = 0.1 + 0.001 * rng.random(DP) + np.array([0.03 if r == slow else 0.0 for r in ranks])
                first = t0 + compute
                second = first + 0.001
                done = [first.max() + 0.01, max(second.max(), first.max() + 0.01) + 0.01]
                for d, r in enumerate(ranks):
                    base = {"kind": "op", "job": "toy", "step": step, "rank": r, "dp": d, "pp": p, "tp": t}
                    spans.append({**base, "op": "forward", "op_class": "compute", "start": t0,
                                  "duration": float(compute[d])})  # fmt: skip
                    for k, arrival in enumerate((first[d], second[d])):
                        spans.append({**base, "op": "allreduce", "op_class": "comm", "start": float(arrival),
                                      "duration": float(done[k] - arrival), "group": group,
                                      "seq": 2 * step + k})  # fmt: skip
    return spans


def messages(spans: list[Span], key: Callable[[Span], Any]) -> list[bytes]:
    """The spans as telemetry messages, one per value of ``key`` (each its own source), in event order."""
    parts: dict[Any, list[Span]] = {}
    for s in spans:
        parts.setdefault(key(s), []).append(s)
    ordered = sorted(parts.items(), key=lambda kv: min(s["start"] for s in kv[1]))
    return [
        orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": f"exporter/{k}", "seq": 0, "columns": [columns(v)]})
        for k, v in ordered
    ]


def columns(spans: list[Span]) -> dict[str, Any]:
    """Spans as one column batch (a compute span has no group: ``''``, seq -1)."""
    names = ("job", "step", "rank", "dp", "pp", "tp", "op", "op_class", "start", "duration", "group", "seq")
    missing: dict[str, Any] = {"group": "", "seq": -1}
    return {"kind": "op", "n": len(spans), "data": {k: [s.get(k, missing.get(k)) for s in spans] for k in names}}


BATCHINGS: dict[str, Callable[[Span], Any]] = {
    "per rank and step": lambda s: (s["rank"], s["step"]),
    "per stage and step": lambda s: (s["pp"], s["step"]),
    "per step": lambda s: s["step"],
    "all at once": lambda s: 0,
}


def stragglers(msgs: list[bytes]) -> list[dict[str, Any]]:
    out = run_messages(msgs)
    assert out.dead_letters == []
    return [r.body for r in out.audit if r.type == "finding" and r.body["kind"] == "straggler"]


@pytest.mark.parametrize("every", [1, 100])
def test_asynchronous_collectives_are_judged_with_every_member_under_every_batching(every: int) -> None:
    slow = rank_of(2, 1, 0)
    spans = job(24, slow, every)
    found = {name: stragglers(messages(spans, key)) for name, key in BATCHINGS.items()}
    first = found["per rank and step"]
    assert [f["subjects"][0] for f in first] == [f"rank:toy/{slow}"]
    assert first[0]["severity"] == pytest.approx(0.03, abs=0.002)  # the gap to the next-latest member
    assert first[0]["start"] < T0 + STEP_S  # present from the first step
    # late at both collectives of every step, so its sixth late collective is in the third step (had the first
    # of each pair closed when a peer issued the second, before the straggler arrived, only the sixth step)
    assert first[0]["end"] < T0 + 3 * STEP_S and first[0]["evidence"]["late_collectives"] == 6
    for name, same in found.items():
        assert same == first, name


def test_a_healthy_toy_job_has_no_straggler_under_any_batching() -> None:
    spans = job(24, None)
    for name, key in BATCHINGS.items():
        assert stragglers(messages(spans, key)) == [], name


def test_the_last_steps_collectives_are_judged_when_the_job_ends() -> None:
    """A job of three steps (six collectives per group): the straggler is late at all six, the last two
    steps' collectives are judged only at the end of the input (the sixth completes the finding)."""
    slow = rank_of(0, 0, 1)
    found = stragglers(messages(job(3, slow), BATCHINGS["per step"]))
    assert [f["evidence"]["late_collectives"] for f in found] == [6]
    assert [f["subjects"][0] for f in found] == [f"rank:toy/{slow}"]
