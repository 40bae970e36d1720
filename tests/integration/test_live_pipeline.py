"""Telemetry topic → Faust worker → audit topic → sink → DuckDB, on a real broker, as separate processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from audit.query import run_query
from streams.config import Settings
from streams.demo import produce, start_services, wait_drained
from streams.kafka.admin import ensure_topics
from streams.supervise import Child
from streams.synthetic import SyntheticJob
from tests.integration.helpers import http_get, http_json, read_all

pytestmark = pytest.mark.integration

BAD = [b"{truncated", b'{"schema": "driftlog.telemetry/7", "samples": []}']
# one finding, two dead letters, and a step-time roll-up per 50 steps of the 240-step job (the last one of 40
# steps, emitted when the worker ends its idle input as a file's end does)
EXPECTED_RECORDS = 3 + 5


def stop_all(children: list[Child]) -> list[int]:
    return [c.stop() for c in children]


def test_slowdown_reaches_duckdb_and_sigterm_loses_nothing(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings
    bootstrap = cfg.kafka_bootstrap_servers
    job = SyntheticJob()
    asyncio.run(ensure_topics(bootstrap, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(bootstrap, cfg.telemetry_topic, [*job.messages(), *BAD], key=job.job.encode()))

    children = start_services(cfg, tmp_path / "run1")
    try:
        asyncio.run(wait_drained(cfg, children, 120, print))
        status, health = http_json(cfg.sink_http_port, "/health")
        assert (status, health["role"]) == (200, "sink")
        assert health["rows_written"] == EXPECTED_RECORDS
        status, health = http_json(cfg.worker_http_port, "/health")
        assert (status, health["role"]) == (200, "worker")
        _, metrics = http_get(cfg.worker_http_port, "/metrics")
        assert f'driftlog_samples_total{{kind="step"}} {float(job.steps)}' in metrics.decode()
        assert 'driftlog_dead_letters_total{reason="malformed_json"} 1.0' in metrics.decode()
        _, metrics = http_get(cfg.sink_http_port, "/metrics")
        assert "driftlog_sink_commit_seconds_count" in metrics.decode()
        assert "driftlog_consumer_lag{" in metrics.decode()
    finally:
        codes = stop_all(children)
    assert codes == [0, 0], [c.tail() for c in children]

    findings = run_query(cfg.db_path, "SELECT kind, subjects, evidence->>'onset_step' FROM findings").rows
    assert findings == [("step_time_drift", [f"job:{job.job}"], str(job.slow_from))]
    dead = run_query(cfg.db_path, "SELECT reason, source_offset FROM dead_letters ORDER BY reason").rows
    assert [r for r, _ in dead] == ["malformed_json", "unknown_schema"]
    on_topic = asyncio.run(read_all(bootstrap, cfg.audit_topic, EXPECTED_RECORDS + 1, timeout_ms=3000))
    assert run_query(cfg.db_path, "SELECT count(*) FROM audit_log").rows == [(len(on_topic),)] == [(EXPECTED_RECORDS,)]
    rollups = run_query(cfg.db_path, "SELECT name, n FROM metrics_rollup ORDER BY window_start").rows
    assert rollups == [("step_s", 50)] * (job.steps // 50) + [("step_s", job.steps % 50)]

    # the dead-letter topic keeps the original bytes and says why
    dl = asyncio.run(read_all(bootstrap, cfg.dead_letter_topic, 2))
    assert sorted(m.value for m in dl) == sorted(BAD)
    assert {dict(m.headers)["driftlog.reason"] for m in dl} == {b"malformed_json", b"unknown_schema"}

    # restart both: committed offsets hold, so nothing is processed or stored twice
    children = start_services(cfg, tmp_path / "run2")
    try:
        asyncio.run(wait_drained(cfg, children, 60, print))
    finally:
        assert stop_all(children) == [0, 0]
    assert run_query(cfg.db_path, "SELECT count(*) FROM audit_log").rows == [(EXPECTED_RECORDS,)]
