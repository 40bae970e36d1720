"""The worker SIGKILLed at random moments while it works through a scenario on a real broker: the audit trail
in DuckDB holds exactly the records (ids and bodies) of one uninterrupted in-process run over the same input,
each once. (bench/worker_kill_loop.py runs the same with many more kills and samples.)"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audit.query import run_query
from streams.config import Settings
from streams.demo import wait_drained
from streams.kafka.admin import ensure_topics
from streams.sim.output import to_kafka
from streams.sim.scenarios import SCENARIOS
from streams.supervise import Child
from streams.testing import run_stream, stored_records, worker_kill_loop
from tests.unit.test_same_records import records

pytestmark = pytest.mark.integration


def run_cli(cfg: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    from streams.config import to_env

    env = {**os.environ, **to_env(cfg)}
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def test_sigkilled_worker_writes_the_records_of_an_uninterrupted_run(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings
    scenario = SCENARIOS["training-fabric"](3, 16, 120)
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
    asyncio.run(to_kafka(scenario, 3, cfg.kafka_bootstrap_servers, topics, tmp_path / "truth.json", lambda _: None))
    expected = records(run_stream([(kind, value) for kind, _, value in scenario.run()]))

    from streams.config import to_env

    sink = Child(["sink"], to_env(cfg), tmp_path / "sink.log")
    try:
        sink.wait_healthy(cfg.sink_http_port)
        to_healthy = worker_kill_loop(cfg, kills=3, logdir=tmp_path, max_pause_s=2.0)
        asyncio.run(wait_drained(cfg, [sink], 120, print, worker=False))
    finally:
        assert sink.stop() == 0, sink.tail()
    assert max(to_healthy) < 30, to_healthy
    stored = stored_records(cfg.db_path)
    assert stored.keys() == expected.keys()
    assert stored == expected
    ((total, distinct),) = run_query(cfg.db_path, "SELECT count(*), count(DISTINCT record_id) FROM audit_log").rows
    assert total == distinct, "a record was written twice"

    # a replay of the live range gives the live records; two replays give the same chain heads too
    heads = []
    for n in (1, 2):
        db = tmp_path / f"replay{n}.duckdb"
        replay = run_cli(cfg, "replay", "--from", "0", "--db", str(db))
        assert replay.returncode == 0, replay.stderr
        assert stored_records(db) == expected
        heads.append(run_query(db, "SELECT heads, records FROM runs").rows)
    assert heads[0] == heads[1] and heads[0][0][1] == len(expected)


def test_a_snapshot_of_another_state_version_stops_the_worker_in_one_line(
    fresh_settings: Settings, tmp_path: Path
) -> None:
    """The snapshot a task loads when Kafka assigns its partition (Faust's rebalance path) was written by a
    driftlog of another state version: the worker refuses it in one line and exits, instead of restoring it."""
    import pickle
    import zlib

    from aiokafka import AIOKafkaProducer

    from streams.config import to_env
    from streams.durable import _HEADER, STATE_VERSION, ensure_state_topic
    from streams.pipeline import build_processor

    cfg = fresh_settings
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))

    async def plant() -> None:  # what a worker of state version 2 committed for partition 0's task
        await ensure_state_topic(cfg.kafka_bootstrap_servers, cfg.state_topic)
        body = zlib.compress(pickle.dumps((STATE_VERSION - 1, build_processor(cfg), {})))
        producer = AIOKafkaProducer(bootstrap_servers=cfg.kafka_bootstrap_servers, acks="all")
        await producer.start()
        try:
            key = f"{cfg.worker_group}/p0/0".encode()
            await producer.send_and_wait(cfg.state_topic, _HEADER.pack(1, 0, 1) + body, key=key, partition=0)
        finally:
            await producer.stop()

    asyncio.run(plant())
    worker = Child(["worker"], to_env(cfg), tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 90
        while worker.proc.poll() is None:
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.5)
    finally:
        code = worker.stop()
    log = (tmp_path / "worker.log").read_text()
    assert code != 0
    assert f"state version {STATE_VERSION - 1}, this driftlog reads version {STATE_VERSION}" in log
    assert "Traceback" not in log, log[-3000:]
