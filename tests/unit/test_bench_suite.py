"""The benchmark suite's own measuring (bench/suite.py), without a broker."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from bench import suite


class _Lag:
    """A GroupLag whose answers are the given totals, one per call."""

    answers: ClassVar[list[int]] = []  # (set per test)
    asked: ClassVar[int] = 0

    def __init__(self, *_: Any) -> None:
        pass

    async def __aenter__(self) -> _Lag:
        return self

    async def __aexit__(self, *_: object) -> None:
        pass

    async def __call__(self) -> dict[int, int]:
        type(self).asked += 1
        return {0: self.answers.pop(0)}


def test_a_drain_ends_at_the_first_lag_0_the_broker_tells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polled until the group's lag is 0 (not before), the time and CPU taken then."""
    monkeypatch.setattr(suite, "GroupLag", _Lag)
    monkeypatch.setattr(suite, "LAG_POLL_S", 0.0)
    monkeypatch.setattr(_Lag, "answers", [3, 1, 0, 5])
    monkeypatch.setattr(_Lag, "asked", 0)
    monkeypatch.setattr(suite.Cpu, "take", staticmethod(lambda *_: "cpu at lag 0"))
    alive = SimpleNamespace(check_alive=lambda: None)
    run = SimpleNamespace(kafka_bootstrap_servers="", worker_group="g", telemetry_topic="t")
    taken = asyncio.run(suite._drained(run, [alive], alive, None, 60))  # type: ignore[arg-type]
    assert taken == "cpu at lag 0" and _Lag.asked == 3


def test_a_worker_that_processed_nothing_is_left_out_of_the_drains_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its gauge is 0 (never set): no time of its own, so neither the last message processed nor the share of
    the drain one worker ran alone counts it."""
    text = {1: "driftlog_last_message_timestamp_seconds 0.0\n", 2: "driftlog_last_message_timestamp_seconds 12.5\n"}
    monkeypatch.setattr(suite, "worker_metrics", text.__getitem__)
    assert math.isnan(suite.last_message(1)) and suite.last_message(2) == 12.5
    t = suite.Timed(0.0, [math.nan, 12.5], 13.0, 14.0, *[None] * 3)  # type: ignore[arg-type]
    assert t.done == [12.5] and t.processed == 12.5


def test_the_idle_wait_left_out_is_the_time_no_worker_worked(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the timing's start (90 s) each worker works to its last input message plus its work after it (its
    input-end round's start less its wait) and through that round. One worker: its wait is left out. Several:
    the time none of them worked, less their work after their last input, which may have been anywhere in their
    waits (1 works to 97.5 and 100-100.5; 2 to 101.75 and 104-104.25, 0.25 s of it after its last input: 97.5-100
    is 2's drain, not left out, nor 1's flush at 100 in 2's wait; 101.75-104, less 0.25: 2.0 s). A worker whose
    input-end round came before the timing (5: a flush of the empty topics while the group formed) or that ended
    no input (3, its gauges 0) does not count; with none at all there is no wait to tell (nan)."""

    def told(at: float, wait: float, work: float, took: float) -> str:
        return "".join(f"driftlog_input_end_{n}_seconds {v}\n" for n, v in
                       (("timestamp", at), ("wait", wait), ("work", work), ("round", took)))  # fmt: skip

    text = {1: told(100.0, 2.5, 0.0, 0.5), 2: told(104.0, 2.25, 0.25, 0.25), 3: told(0.0, 0.0, 0.0, 0.0),
            4: told(101.0, 4.0, 0.0, 1.0), 5: told(50.0, 2.0, 0.0, 0.1)}  # fmt: skip
    monkeypatch.setattr(suite, "worker_metrics", text.__getitem__)
    assert suite.idle_wait([1], 90.0) == 2.5 and suite.idle_wait([2, 3], 90.0) == 2.25
    assert suite.idle_wait([1, 2, 3], 90.0) == 2.0
    assert suite.idle_wait([1, 4], 90.0) == 3.0  # (4 works to 97 and 101-102: idle 97.5-100 and 100.5-101)
    assert suite.idle_wait([2, 4], 90.0) == 1.75  # (2 drains to 101.75, 4's round to 102: idle 102-104, less 0.25)
    assert suite.idle_wait([1, 5], 90.0) == 2.5
    assert math.isnan(suite.idle_wait([3], 90.0)) and math.isnan(suite.idle_wait([5], 90.0))
