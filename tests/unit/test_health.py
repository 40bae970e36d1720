"""What /health says, from what the process observed (streams/health.py), and the log flood guard."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.health import Health, bounded
from streams.logs import RateLimit, plain


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _health(clock: Clock) -> Health:
    h = Health("sink", broker_timeout_s=30.0, stall_s=60.0, clock=clock)
    h.ready = True
    return h


def test_not_ready_until_consuming() -> None:
    h = Health("sink", clock=Clock())
    assert h.verdict()[1]["reasons"] == ["starting: not consuming yet"]
    h.ready = True
    assert h.verdict()[0]


def test_a_short_broker_blip_stays_healthy_a_long_outage_does_not() -> None:
    clock = Clock()
    h = _health(clock)
    h.broker_failed(ConnectionError("connection refused"))
    clock.t += 29
    assert h.verdict()[0]
    clock.t += 2
    ok, body = h.verdict()
    assert not ok and "broker unreachable for 31s" in body["reasons"][0] and "connection refused" in body["reasons"][0]
    h.broker_ok()
    assert h.verdict()[0] and h.verdict()[1]["broker"] == "ok"


def test_lag_without_commits_is_a_stall_but_idle_is_not() -> None:
    clock = Clock()
    h = _health(clock)
    clock.t += 3600  # idle for an hour, nothing waiting: healthy
    assert h.verdict()[0]
    h.observe_lag(50)
    clock.t += 59
    assert h.verdict()[0]
    clock.t += 2
    ok, body = h.verdict()
    assert not ok and "50 records waiting but nothing committed for 61s" in body["reasons"][0]
    h.committed()  # progress: the stall clock restarts
    assert h.verdict()[0]
    h.observe_lag(0)
    clock.t += 600
    assert h.verdict()[0]


def test_a_fault_is_unhealthy_with_its_one_line_reason_first_one_kept() -> None:
    h = _health(Clock())
    h.fail(OSError(28, "No space left on device"))
    h.fail("cannot rollback - no transaction is active")  # a consequence: not shown instead of the cause
    ok, body = h.verdict()
    assert not ok and body["reasons"] == ["[Errno 28] No space left on device"]


def test_shutting_down_is_not_healthy() -> None:
    h = _health(Clock())
    h.stopping = True
    assert h.verdict() == (False, {**h.verdict()[1], "reasons": ["shutting down"]})


def test_bounded_gives_up_in_time_and_swallows_failures() -> None:
    async def never() -> None:
        await asyncio.sleep(3600)

    async def boom() -> None:
        raise RuntimeError("broker gone")

    async def main() -> tuple[object, object, object]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        a = await bounded(never(), 0.05, "closing")
        assert loop.time() - start < 1
        return a, await bounded(boom(), 1, "closing"), await bounded(asyncio.sleep(0, "x"), 1, "closing")

    assert asyncio.run(main()) == (None, None, "x")


def test_rate_limit_lets_a_burst_through_then_counts_what_it_dropped() -> None:
    clock = Clock()
    limit = RateLimit(interval_s=10, burst=3, clock=clock)

    def rec(msg: str = "retrying %s") -> logging.LogRecord:
        return logging.LogRecord("aiokafka", logging.WARNING, __file__, 1, msg, ("x",), None)

    passed = [limit.filter(rec()) for _ in range(100)]
    assert passed.count(True) == 3
    assert limit.filter(rec("another message"))  # its own budget
    clock.t += 10
    first = rec()
    assert limit.filter(first) and first.suppressed == 97  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text", ["\x1b[32mgreen\x1b[0m", "\x1b]0;title\x07green", "gr\x08een\r", "\x1b[1;31mgr\x1b[Keen"]
)
def test_plain_strips_terminal_control_codes(text: str) -> None:
    assert plain(text) == "green"


def test_a_step_that_needs_the_broker_waits_for_it_and_says_so() -> None:
    from aiokafka.errors import KafkaConnectionError

    from streams.health import until_broker

    h = Health("worker", clock=Clock())
    seen: list[list[str]] = []
    attempts = 0

    async def create_topics() -> str:
        nonlocal attempts
        attempts += 1
        seen.append(h.reasons())
        if attempts < 3:
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]")
        return "created"

    assert asyncio.run(until_broker(create_topics, h, asyncio.Event(), every_s=0.01)) == "created"
    assert attempts == 3
    assert seen[1] == ["starting: waiting for the broker (KafkaConnectionError: Unable to bootstrap from "
                       "[('127.0.0.1', 1)])"]  # fmt: skip
    h.broker_ok()
    assert h.reasons() == ["starting: not consuming yet"]


def test_waiting_for_the_broker_ends_on_sigterm_and_not_on_other_errors() -> None:
    from aiokafka.errors import KafkaConnectionError, PolicyViolationError

    from streams.health import until_broker

    async def away() -> None:
        raise KafkaConnectionError("away")

    async def stop_soon(stopping: asyncio.Event) -> None:
        await asyncio.sleep(0.05)
        stopping.set()

    async def main() -> object:
        stopping = asyncio.Event()
        asyncio.ensure_future(stop_soon(stopping))  # noqa: RUF006
        return await asyncio.wait_for(until_broker(away, Health("sink"), stopping, every_s=10.0), 2.0)

    assert asyncio.run(main()) is None  # SIGTERM while waiting: at once, not after every_s

    async def refused() -> None:
        raise PolicyViolationError("topic creation refused")

    with pytest.raises(PolicyViolationError):  # the broker answered: not a wait
        asyncio.run(until_broker(refused, Health("sink"), asyncio.Event(), every_s=0.01))


def test_the_worker_asked_for_an_unassigned_partition_s_high_watermark_answers_unknown() -> None:
    """/health may ask in the middle of a rebalance, for a partition this worker no longer (or not yet)
    holds: aiokafka asserts; the answer must be "unknown", not an error on the endpoint."""
    from types import SimpleNamespace

    from streams.worker import OpsService

    def unassigned(tp: object) -> int:
        raise AssertionError("Partition is not assigned")

    service = OpsService.__new__(OpsService)
    service.app = SimpleNamespace(producer=object(), consumer=SimpleNamespace(highwater=unassigned))  # type: ignore[assignment]
    assert service.highwater("driftlog.telemetry", 3) is None
    service.app = SimpleNamespace(producer=object(), consumer=SimpleNamespace(highwater=lambda tp: 42))  # type: ignore[assignment]
    assert service.highwater("driftlog.telemetry", 3) == 42
    service.app = SimpleNamespace(producer=None, consumer=None)  # type: ignore[assignment]
    assert service.highwater("driftlog.telemetry", 3) is None
