"""The sink stores every audit record exactly once, however often it is killed with SIGKILL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from audit.checkpoint import public_key_path
from audit.query import run_query
from audit.records import AuditRecord, SourcePosition
from audit.verify import verify
from streams.config import Settings
from streams.demo import produce
from streams.engine.findings import Finding
from streams.kafka.admin import ensure_topics
from streams.testing import sigkill_loop

pytestmark = pytest.mark.integration


def audit_records(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        f = Finding("step_time_drift", (f"job:j{i % 7}",), float(i), float(i + 1), 1.2, {"i": i}, {})
        out.append(AuditRecord("finding", f.id, SourcePosition("tele", 0, i), f.as_dict(), f"job:j{i % 7}").encode())
    return out


def test_kill_dash_nine_loop_gives_every_record_once(fresh_settings: Settings, tmp_path: Path) -> None:
    n = 30_000
    cfg = fresh_settings.model_copy(update={"sink_batch_max": 500, "checkpoint_interval_s": 0.2})
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(n)))
    seen_after_kill = sigkill_loop(cfg, kills=4, logdir=tmp_path)
    # the kills really landed mid-stream (else this test would prove nothing)
    assert any(0 < c < n for c in seen_after_kill), seen_after_kill
    rows = run_query(
        cfg.db_path,
        'SELECT count(*), count(DISTINCT ("partition", "offset")), count(DISTINCT record_id) FROM audit_log',
    ).rows
    assert rows == [(n, n, n)]
    assert run_query(cfg.db_path, "SELECT count(*) FROM findings").rows == [(n,)]
    assert run_query(cfg.db_path, "SELECT sum(next_offset) FROM sink_offsets").rows == [(n,)]
    report = verify(cfg.db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
    assert report.problems == [] and report.checkpoints > 0


def test_a_new_store_reads_from_the_beginning_whatever_the_group_committed(fresh_settings: Settings) -> None:
    from audit.sink import AuditSink
    from audit.store import MemoryStore

    n = 300
    cfg = fresh_settings.model_copy(update={"sink_http_port": 0, "sink_batch_wait_ms": 20})
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(n)))

    async def drain(store: MemoryStore) -> None:
        sink = AuditSink(cfg, store)
        task = asyncio.ensure_future(sink.run())
        for _ in range(600):
            if len(store.records) >= n or task.done():
                break
            await asyncio.sleep(0.05)
        sink.stopping.set()
        await task

    first, second = MemoryStore(), MemoryStore()
    asyncio.run(drain(first))  # commits the group's offsets to Kafka (monitoring) at the end of the topic
    asyncio.run(drain(second))
    assert len(first.records) == len(second.records) == n
