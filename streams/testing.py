"""Test harnesses shipped with the package: run messages through the same processor the live agents use
(no broker), and a SIGKILL loop against a real sink (for the integration tests and bench/kill_loop.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from audit.records import SourcePosition
from streams.config import Settings, to_env
from streams.engine.engine import Engine, EngineConfig
from streams.pipeline import Output, Processor

if TYPE_CHECKING:
    from streams.supervise import Child


def run_messages(
    messages: Iterable[bytes],
    config: EngineConfig | None = None,
    decisions: Iterable[bytes] = (),
    processor: Processor | None = None,
) -> Output:
    """Feed telemetry ``messages`` (offsets 0, 1, ... of topic ``telemetry``), then ``decisions`` (of topic
    ``decisions``) through one processor, then flush it; return everything it emitted."""
    processor = processor or Processor(Engine(config or EngineConfig()))
    items = [("telemetry", m) for m in messages] + [("decisions", d) for d in decisions]
    return run_stream(items, processor)


def run_stream(items: Iterable[tuple[str, bytes]], processor: Processor | None = None) -> Output:
    """Feed ``(topic kind 'telemetry' | 'decisions', value)`` pairs in the given order through one processor
    (both topics declared as its inputs), then flush it; return everything it emitted."""
    processor = processor or Processor()
    processor.declare([SourcePosition("telemetry", 0, 0), SourcePosition("decisions", 0, 0)])
    total = Output()
    offsets = {"telemetry": 0, "decisions": 0}
    for kind, raw in items:
        source = SourcePosition(kind, 0, offsets[kind])
        offsets[kind] += 1
        total.extend(processor.telemetry(raw, source) if kind == "telemetry" else processor.decision(raw, source))
    total.extend(processor.flush(SourcePosition("telemetry", 0, max(0, offsets["telemetry"] - 1))))
    return total


def sigkill_loop(
    cfg: Settings,
    kills: int,
    logdir: Path,
    seed: int = 11,
    max_pause_s: float = 0.3,
    before_last: Callable[[], None] | None = None,
) -> list[int]:
    """Start the sink, SIGKILL it at a random moment after it is healthy, ``kills`` times; then (after
    ``before_last``, e.g. waiting for a producer) run it to the end of the audit topic and stop it cleanly.
    Returns the audit_log row count seen after each kill."""
    import random
    import signal
    import time

    from audit.query import run_query
    from streams.kafka.admin import group_lag
    from streams.supervise import Child

    rng = random.Random(seed)
    env = to_env(cfg)
    seen = []
    for k in range(kills):
        sink = Child(["sink"], env, logdir / f"sink{k}.log")
        sink.wait_healthy(cfg.sink_http_port)
        time.sleep(rng.uniform(0.0, max_pause_s))
        sink.stop(grace=0, sig=signal.SIGKILL)
        seen.append(run_query(cfg.db_path, "SELECT count(*) FROM audit_log").rows[0][0])
    if before_last is not None:
        before_last()
    sink = Child(["sink"], env, logdir / "sink-final.log")
    sink.wait_healthy(cfg.sink_http_port)

    def drained() -> bool:
        return not sum(asyncio.run(group_lag(cfg.kafka_bootstrap_servers, cfg.sink_group, [cfg.audit_topic])).values())

    run_to_end(sink, drained, 300, f"reach the end of {cfg.audit_topic}")
    return seen


def run_to_end(child: Child, done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Let a started child run until ``done()`` (checked every 0.5 s), then stop it cleanly; raises with the
    end of its log when it dies, does not get there in ``timeout_s`` (``what``: what it had to do), or does
    not stop cleanly."""
    import time

    deadline = time.monotonic() + timeout_s
    while not done():
        child.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"`driftlog {' '.join(child.args)}` did not {what}:\n{child.tail()}")
        time.sleep(0.5)
    if child.stop() != 0:
        raise RuntimeError(f"`driftlog {' '.join(child.args)}` did not stop cleanly:\n{child.tail()}")


def worker_kill_loop(
    cfg: Settings,
    kills: int,
    logdir: Path,
    seed: int = 12,
    max_pause_s: float = 3.0,
    mid_stream: list[bool] | None = None,
) -> list[float]:
    """With a sink running throughout: start the worker, SIGKILL it at a random moment after it is healthy,
    ``kills`` times; then run it until its input has ended and is committed, and stop it cleanly. Returns the
    seconds each restarted worker took from start to healthy; ``mid_stream`` gets, per kill, whether the
    worker had not yet ended its input when it was killed."""
    import random
    import signal
    import time

    from streams.demo import input_ended
    from streams.supervise import Child

    rng = random.Random(seed)
    env = to_env(cfg)
    to_healthy = []
    for k in range(kills):
        started = time.monotonic()
        worker = Child(["worker"], env, logdir / f"worker{k}.log")
        worker.wait_healthy(cfg.worker_http_port, timeout=120)
        to_healthy.append(time.monotonic() - started)
        time.sleep(rng.uniform(0.0, max_pause_s))
        if mid_stream is not None:
            mid_stream.append(not input_ended(cfg.worker_http_port))
        worker.stop(grace=0, sig=signal.SIGKILL)
    worker = Child(["worker"], env, logdir / "worker-final.log")
    worker.wait_healthy(cfg.worker_http_port, timeout=120)
    run_to_end(worker, lambda: input_ended(cfg.worker_http_port), 600, "end its input")
    return to_healthy


def stored_records(db: Path) -> dict[tuple[str, str], bytes]:
    """(type, id) -> canonical body of every record in an audit DB (one per id; a second, different body for
    an id raises)."""
    import orjson

    from audit.query import run_query

    found: dict[tuple[str, str], bytes] = {}
    for (value,) in run_query(db, 'SELECT decode(value) FROM audit_log ORDER BY partition, "offset"').rows:
        doc = orjson.loads(value)
        body = orjson.dumps(doc["body"], option=orjson.OPT_SORT_KEYS)
        if found.setdefault((doc["type"], doc["id"]), body) != body:
            raise AssertionError(f"{doc['type']} {doc['id']} stored twice with different bodies")
    return found
