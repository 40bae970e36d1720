"""The worker and the sink ride out a broker outage together: the broker (a local one of the test's own, never
the shared one) is stopped mid-stream and started again (same data, same port); neither process exits, the
worker's ``/health`` says 503 with the reason while the broker is away and 200 after, and the audit trail
afterwards holds exactly the records of an uninterrupted run (ids and bodies), each once, and verifies.
(bench/outage_drill.py --worker runs the same with outages of minutes.)"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from audit.checkpoint import public_key_path
from audit.query import run_query
from audit.verify import verify
from streams.config import Settings, load, to_env
from streams.demo import input_ended, namespaced, wait_drained
from streams.kafka.admin import ensure_topics
from streams.kafka.launcher import LocalKafka
from streams.sim.output import to_kafka
from streams.sim.scenarios import SCENARIOS
from streams.supervise import Child
from streams.testing import run_stream, stored_records
from tests.integration.test_outages import health, sigterm, wait_for
from tests.unit.test_same_records import records

pytestmark = pytest.mark.integration


@dataclass
class OutageRun:
    """What one worker + sink run through a broker outage saw."""

    outage_s: float
    worker_alive: bool = False
    sink_alive: bool = False
    saw_503: list[str] = field(default_factory=list)  # the worker's reasons while the broker was away
    expected: int = 0
    stored: int = 0
    missing: int = 0
    unexpected: int = 0
    doubled: int = 0
    verify_problems: list[str] = field(default_factory=list)
    worker_log_lines: int = 0
    tracebacks: int = 0
    back_to_200_s: float = 0.0


def worker_outage_run(broker: LocalKafka, outage_s: float, work: Path, ranks: int = 32, steps: int = 200) -> OutageRun:
    """Produce a scenario, start a sink and a worker, stop the broker for ``outage_s`` once the worker has
    committed part of its input, start it again, run until the worker has ended its input and the sink has
    stored everything; compare the audit trail with one uninterrupted in-process run."""
    state = broker.start()
    work.mkdir(parents=True, exist_ok=True)
    base = load(kafka_bootstrap_servers=state.bootstrap, home=work / "home", topic_partitions=2)
    cfg = namespaced(base, f"wo-{uuid.uuid4().hex[:8]}", work / "audit.duckdb").model_copy(
        update={"health_broker_timeout_s": 3.0, "checkpoint_interval_s": 0.5}
    )
    scenario = SCENARIOS["training-fabric"](5, ranks, steps)
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
    asyncio.run(to_kafka(scenario, 5, cfg.kafka_bootstrap_servers, topics, work / "truth.json", lambda _: None))
    expected = records(run_stream([(kind, value) for kind, _, value in scenario.run()]))
    run = OutageRun(outage_s, expected=len(expected))
    env = to_env(cfg)
    sink = Child(["sink"], env, work / "sink.log")
    worker = Child(["worker"], env, work / "worker.log")
    try:
        sink.wait_healthy(cfg.sink_http_port)
        worker.wait_healthy(cfg.worker_http_port, timeout=120)
        wait_for("a first snapshot", lambda: _snapshots(cfg) > 0, worker, timeout=120)
        mid_stream = not input_ended(cfg.worker_http_port)
        assert broker.stop()
        down = time.monotonic()
        while time.monotonic() - down < outage_s:
            status, body = _health(cfg.worker_http_port)
            if status == 503 and not run.saw_503:
                run.saw_503 = list(body.get("reasons", []))
            time.sleep(0.5)
        run.worker_alive, run.sink_alive = worker.proc.poll() is None, sink.proc.poll() is None
        assert broker.start().port == state.port
        back = time.monotonic()
        wait_for("the worker healthy again", lambda: _status(cfg.worker_http_port) == 200, worker, timeout=180)
        run.back_to_200_s = time.monotonic() - back
        asyncio.run(wait_drained(cfg, [worker, sink], 600, print))
        assert mid_stream or outage_s == 0, "the input had ended before the outage: the run proves nothing"
        assert worker.stop(grace=15) == 0, worker.tail()
        assert sink.stop(grace=15) == 0, sink.tail()
    finally:
        for child in (worker, sink):
            child.stop(grace=0, sig=signal.SIGKILL)
    stored = stored_records(cfg.db_path)
    run.stored = len(stored)
    run.missing = len(expected.keys() - stored.keys())
    run.unexpected = len(stored.keys() - expected.keys()) + sum(
        1 for k in stored.keys() & expected.keys() if stored[k] != expected[k]
    )
    ((total, distinct),) = run_query(cfg.db_path, "SELECT count(*), count(DISTINCT record_id) FROM audit_log").rows
    run.doubled = total - distinct
    report = verify(cfg.db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
    run.verify_problems = [str(p) for p in report.problems]
    log = (work / "worker.log").read_text(errors="replace")
    run.worker_log_lines, run.tracebacks = len(log.splitlines()), log.count("Traceback")
    return run


def _snapshots(cfg: Settings) -> int:
    return sum(_health(cfg.worker_http_port)[1].get("snapshots", {}).values())


def test_the_worker_rides_out_a_broker_outage_with_nothing_lost_or_doubled(
    own_broker: LocalKafka, tmp_path: Path
) -> None:
    run = worker_outage_run(own_broker, 15.0, tmp_path)
    assert run.worker_alive and run.sink_alive, run
    assert any("broker unreachable" in r for r in run.saw_503), run
    assert (run.missing, run.unexpected, run.doubled) == (0, 0, 0), run
    assert run.stored == run.expected and run.verify_problems == [], run
    assert run.tracebacks == 0, run


def _away_settings(broker: LocalKafka, work: Path) -> Settings:
    state = broker.start()
    base = load(kafka_bootstrap_servers=state.bootstrap, home=work / "home", topic_partitions=2)
    return namespaced(base, f"wa-{uuid.uuid4().hex[:8]}", work / "audit.duckdb").model_copy(
        update={"health_broker_timeout_s": 3.0}
    )


def test_started_while_the_broker_is_away_both_wait_for_it(own_broker: LocalKafka, tmp_path: Path) -> None:
    """Neither exits: both answer 503 with the reason until the broker is there (the topics do not exist
    yet either: they create them), then 200; SIGTERM then exits within 10 s."""
    cfg = _away_settings(own_broker, tmp_path)
    assert own_broker.stop()
    env = to_env(cfg)
    children = {"worker": Child(["worker"], env, tmp_path / "worker.log"),
                "sink": Child(["sink"], env, tmp_path / "sink.log")}  # fmt: skip
    ports = {"worker": cfg.worker_http_port, "sink": cfg.sink_http_port}
    try:
        for name, child in children.items():
            wait_for(f"{name}: 503 waiting", lambda n=name: "waiting for the broker" in str(_reasons(ports[n])),
                     child, timeout=60)  # fmt: skip
        time.sleep(6)  # past the broker limit: still there, still saying why
        for name, child in children.items():
            child.check_alive()
            status, body = health(ports[name])
            assert status == 503 and any("broker" in r for r in body["reasons"]), body
        own_broker.start()
        for name, child in children.items():
            wait_for(f"{name}: 200", lambda n=name: _status(ports[n]) == 200, child, timeout=120)
        exits = {name: sigterm(child) for name, child in children.items()}
    finally:
        for child in children.values():
            child.stop(grace=0, sig=signal.SIGKILL)
    for name, (code, took) in exits.items():
        log = (tmp_path / f"{name}.log").read_text()
        assert code == 0 and took < 10, (name, code, took, log[-2000:])
        assert "Traceback" not in log and "driftlog: error" not in log, log[-2000:]


def test_worker_sigterm_while_the_broker_is_away_exits_within_10s(own_broker: LocalKafka, tmp_path: Path) -> None:
    cfg = _away_settings(own_broker, tmp_path)
    worker = Child(["worker"], to_env(cfg), tmp_path / "worker.log")
    try:
        worker.wait_healthy(cfg.worker_http_port, timeout=120)
        assert own_broker.stop()
        wait_for("503 while the broker is away", lambda: _status(cfg.worker_http_port) == 503, worker, timeout=30)
        code, took = sigterm(worker)
    finally:
        worker.stop(grace=0, sig=signal.SIGKILL)
        own_broker.start()
    log = worker.log_path.read_text()
    assert code == 0 and took < 10, (code, took, log[-2000:])
    assert "Traceback" not in log, log[-3000:]


def _health(port: int) -> tuple[int, dict[str, Any]]:
    """(status, body); (0, {}) while nothing answers on the port (a process starting or between servers)."""
    try:
        return health(port)
    except (OSError, ValueError):
        return 0, {}


def _status(port: int) -> int:
    return _health(port)[0]


def _reasons(port: int) -> list[str]:
    return list(_health(port)[1].get("reasons", []))
