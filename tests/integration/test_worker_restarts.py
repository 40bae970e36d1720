"""The worker SIGKILLed at random moments while it works through a scenario on a real broker: the audit trail
in DuckDB holds exactly the records (ids and bodies) of one uninterrupted in-process run over the same input,
each once. (bench/worker_kill_loop.py runs the same with many more kills and samples.)"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
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
    (total, distinct), = run_query(cfg.db_path, "SELECT count(*), count(DISTINCT record_id) FROM audit_log").rows
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
