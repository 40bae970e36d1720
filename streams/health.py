"""What ``/health`` says, decided from what a long-running process observed (not from whether it is alive).

A :class:`Health` is told what happens — the broker answered or failed, records were committed, how far
behind the input is, a fault that stops the process — and :meth:`Health.verdict` turns that into the
endpoint's answer: 503 with the reasons when

- the broker has been unreachable for ``broker_timeout_s`` (a short blip is ridden out quietly),
- records wait (lag > 0) but nothing was committed for ``stall_s``,
- a fault was recorded (a write failed, stored offsets lie beyond the topic's end, ...),
- a passing problem is being ridden out (``problems``: a transaction waiting for the broker, a reader
  starting again),
- the process is still starting (``ready`` not set yet) or shutting down.

The sink uses it; the worker can use it the same way (see ``broker_ok``/``broker_failed``). The clock is
injectable so that tests do not sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka.errors import KafkaError, KafkaTimeoutError

_T = TypeVar("_T")
log = logging.getLogger("driftlog.health")


@dataclass
class Health:
    role: str
    broker_timeout_s: float = 30.0
    stall_s: float = 120.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    broker_down_since: float | None = None
    broker_error: str = ""
    last_commit: float | None = None
    lag: int = 0
    lag_since: float | None = None  # when records started waiting (since the last commit)
    fault: str | None = None
    ready: bool = False  # set once the process consumes (partitions assigned): 503 "starting" before
    stopping: bool = False
    details: dict[str, Any] = field(default_factory=dict)  # extra fields shown as they are
    problems: list[str] = field(default_factory=list)  # passing troubles the process is riding out (503)

    def __post_init__(self) -> None:
        self.started = self.clock()

    # -- what happened -------------------------------------------------------------------------------
    def broker_ok(self) -> None:
        if self.broker_down_since is not None:
            down = self.clock() - self.broker_down_since
            log.warning("broker reachable again", extra={"role": self.role, "down_s": round(down, 1)})
        self.broker_down_since, self.broker_error = None, ""

    def broker_failed(self, error: BaseException | str) -> None:
        """The broker did not answer. Only the first failure of an outage is logged."""
        if self.broker_down_since is None:
            self.broker_down_since = self.clock()
            log.warning("broker unreachable; retrying", extra={"role": self.role, "error": str(error)})
        self.broker_error = _one_line(error)

    def committed(self) -> None:
        now = self.clock()
        self.last_commit = now
        self.lag_since = now if self.lag else None

    def observe_lag(self, lag: int) -> None:
        if lag and self.lag_since is None:
            self.lag_since = self.clock()
        elif not lag:
            self.lag_since = None
        self.lag = lag

    def fail(self, reason: BaseException | str) -> None:
        """A fault that stops the process; the first one is kept (later ones are its consequences)."""
        if self.fault is None:
            self.fault = _one_line(reason)

    # -- what /health says ---------------------------------------------------------------------------
    def reasons(self) -> list[str]:
        now, out = self.clock(), []
        if self.fault is not None:
            out.append(self.fault)
        out.extend(self.problems)
        if self.stopping:
            out.append("shutting down")
        elif not self.ready and self.broker_down_since is not None:
            out.append(f"starting: waiting for the broker ({self.broker_error})")
        elif not self.ready:
            out.append("starting: not consuming yet")
        if self.broker_down_since is not None and now - self.broker_down_since >= self.broker_timeout_s:
            out.append(
                f"broker unreachable for {now - self.broker_down_since:.0f}s (limit {self.broker_timeout_s:g}s): "
                f"{self.broker_error}"
            )
        if self.lag_since is not None and now - self.lag_since >= self.stall_s:
            out.append(
                f"{self.lag} records waiting but nothing committed for {now - self.lag_since:.0f}s "
                f"(limit {self.stall_s:g}s)"
            )
        return out

    def verdict(self) -> tuple[bool, dict[str, Any]]:
        now, reasons = self.clock(), self.reasons()
        body: dict[str, Any] = {
            "role": self.role,
            "uptime_s": round(now - self.started, 3),
            "broker": "ok"
            if self.broker_down_since is None
            else f"unreachable for {now - self.broker_down_since:.0f}s",
            "lag": self.lag,
            "last_commit_age_s": None if self.last_commit is None else round(now - self.last_commit, 3),
            **self.details,
        }
        if reasons:
            body["reasons"] = reasons
        return (not reasons, body)


def _one_line(error: BaseException | str) -> str:
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return " ".join(text.split())


async def bounded(awaitable: Awaitable[_T], timeout_s: float, what: str) -> _T | None:
    """Await with a time limit (shutdown steps that talk to a broker that may be gone): None, logged once,
    when it does not finish in time or fails."""
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError:
        log.warning(f"{what} did not finish within {timeout_s:g}s; going on without it")
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this task is being cancelled: not ours to swallow
        # aiokafka's consumer.stop() lets the CancelledError of its own fetch tasks escape during an outage
        log.warning(f"{what} was cancelled inside the client; going on without it")
    except Exception as exc:  # shutdown goes on whatever a closing client raises
        log.warning(f"{what} failed; going on without it", extra={"error": _one_line(exc)})
    return None


async def probe(bootstrap: str, timeout_s: float = 2.0) -> str | None:
    """None when a TCP connection to one of the bootstrap servers opens within ``timeout_s``, else why not.
    Cheap and independent of a client's cached connections (use it beside a metadata request)."""
    errors = []
    for address in filter(None, (a.strip() for a in bootstrap.split(","))):
        host, _, port = address.rpartition(":")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), timeout_s)
        except (OSError, ValueError, TimeoutError) as exc:
            errors.append(f"{address}: {_one_line(exc)}")
            continue
        writer.close()
        return None
    return "; ".join(errors) or "no bootstrap servers configured"


async def until_broker(
    attempt: Callable[[], Awaitable[_T]], status: Health, stopping: asyncio.Event, every_s: float = 5.0
) -> _T | None:
    """``attempt()`` (a step that needs the broker: create the topics, start a client) until it succeeds,
    every ``every_s`` while the broker is away (``status`` says so: 503 "starting: waiting for the broker");
    None when ``stopping`` is set first. Each attempt is bounded by three times ``every_s``."""
    while not stopping.is_set():
        try:
            return await asyncio.wait_for(attempt(), every_s * 3)
        except (KafkaError, OSError, TimeoutError) as exc:
            if isinstance(exc, KafkaError) and not (exc.retriable or isinstance(exc, KafkaTimeoutError)):
                raise  # the broker answered: something else is wrong (a refused topic, an ACL)
            status.broker_failed(exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), every_s)
    return None


def time_left(budget_s: float) -> Callable[[], float]:
    """Seconds left of a shutdown budget, for the steps that share it (at least 0.1 s each)."""
    deadline = time.monotonic() + budget_s
    return lambda: max(0.1, deadline - time.monotonic())
