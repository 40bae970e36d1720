"""`driftlog produce` of PyTorch profiler traces against a real broker, through worker and sink."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from audit.query import run_query
from streams.config import Settings, to_env
from streams.demo import start_services, wait_drained
from streams.formats.kineto import read_trace_files
from streams.kafka.admin import ensure_topics
from tests.integration.helpers import read_all
from tests.kineto_traces import write_job

pytestmark = pytest.mark.integration


def test_profiler_traces_reach_the_audit_trail(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    paths = write_job(tmp_path / "traces", world=8, steps=range(40), straggler=3)
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "produce", *map(str, paths), "--set", "job=bert"],
                          env=to_env(cfg), capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected = list(read_trace_files(paths, job="bert"))
    assert proc.stdout.startswith(f"sent 8 profiler traces of job bert as {len(expected):,} messages")
    sent = asyncio.run(read_all(cfg.kafka_bootstrap_servers, cfg.telemetry_topic, len(expected)))
    assert sorted(m.value for m in sent) == sorted(expected) and {m.key for m in sent} == {b"bert"}

    children = start_services(cfg, tmp_path / "logs")
    try:
        asyncio.run(wait_drained(cfg, children, 180, print))
        # the report while the sink holds the DuckDB file: through the sink's SQL endpoint
        report = subprocess.run([sys.executable, "-m", "streams.cli", "report", "--out", str(tmp_path / "r.html")],
                                env=to_env(cfg), capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    finally:
        assert [c.stop() for c in children] == [0, 0]
    assert report.returncode == 0, report.stderr
    assert "job bert, 7 figures" in report.stdout
    rows = run_query(cfg.db_path, "SELECT kind, subjects FROM findings WHERE kind = 'straggler'").rows
    assert rows and "rank:bert/3" in rows[0][1]
    assert run_query(cfg.db_path, "SELECT count(*) FROM dead_letters").rows == [(0,)]
