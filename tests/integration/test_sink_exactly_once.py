"""The sink stores every audit record exactly once, however often it is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import pytest

from audit.query import run_query
from audit.records import AuditRecord, SourcePosition
from streams.config import Settings, to_env
from streams.demo import produce
from streams.engine.findings import Finding
from streams.kafka.admin import ensure_topics
from streams.supervise import Child

pytestmark = pytest.mark.integration


def audit_records(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        f = Finding("step_time_drift", (f"job:j{i % 7}",), float(i), float(i + 1), 1.2, {"i": i}, {})
        out.append(AuditRecord("finding", f.id, SourcePosition("tele", 0, i), f.as_dict(), f"job:j{i % 7}").encode())
    return out


def test_kill_dash_nine_loop_gives_every_record_once(fresh_settings: Settings, tmp_path: Path) -> None:
    n, kills = 30_000, 4
    cfg = fresh_settings.model_copy(update={"sink_batch_max": 500})
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    records = audit_records(n)
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, records))
    rng = random.Random(11)
    env = to_env(cfg)
    seen_after_kill = []
    for k in range(kills):
        sink = Child(["sink"], env, tmp_path / f"sink{k}.log")
        sink.wait_healthy(cfg.sink_http_port)
        time.sleep(rng.uniform(0.0, 0.3))
        sink.stop(grace=0, sig=signal.SIGKILL)
        seen_after_kill.append(run_query(cfg.db_path, "SELECT count(*) FROM audit_log").rows[0][0])
    # the kills really landed mid-stream (else this test would prove nothing)
    assert any(0 < c < n for c in seen_after_kill), seen_after_kill
    sink = Child(["sink"], env, tmp_path / "sink-final.log")
    sink.wait_healthy(cfg.sink_http_port)
    deadline = time.monotonic() + 120
    while True:
        sink.check_alive()
        stored = _count_via_health(cfg)
        if stored is not None and stored >= 0 and _done(sink, cfg, n):
            break
        assert time.monotonic() < deadline, sink.tail()
        time.sleep(0.5)
    assert sink.stop() == 0
    rows = run_query(
        cfg.db_path,
        'SELECT count(*), count(DISTINCT ("partition", "offset")), count(DISTINCT record_id) FROM audit_log',
    ).rows
    assert rows == [(n, n, n)]
    assert run_query(cfg.db_path, "SELECT count(*) FROM findings").rows == [(n,)]
    offsets = run_query(cfg.db_path, "SELECT sum(next_offset) FROM sink_offsets").rows
    assert offsets == [(n,)]


def _count_via_health(cfg: Settings) -> int | None:
    from tests.integration.helpers import http_json

    try:
        _, health = http_json(cfg.sink_http_port, "/health")
    except OSError:
        return None
    return int(health["rows_written"])


def _done(sink: Child, cfg: Settings, n: int) -> bool:
    from streams.kafka.admin import group_lag

    return sum(asyncio.run(group_lag(cfg.kafka_bootstrap_servers, cfg.sink_group, [cfg.audit_topic])).values()) == 0
