"""The audit store while it runs: SQL from another process, signed checkpoints, verify afterwards."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from audit.checkpoint import public_key_path
from audit.query import Endpoint, run_query
from audit.verify import verify
from streams.config import Settings, to_env
from streams.demo import produce
from streams.errors import QueryError
from streams.kafka.admin import ensure_topics
from streams.supervise import Child
from tests.integration.helpers import read_all
from tests.integration.test_sink_exactly_once import audit_records

pytestmark = pytest.mark.integration


def cli(cfg: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], env={**os.environ, **to_env(cfg)},
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_query_while_running_checkpoints_and_verify(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings.model_copy(update={"checkpoint_interval_s": 0.5, "sql_token": "s3cret"})
    bootstrap = cfg.kafka_bootstrap_servers
    asyncio.run(ensure_topics(bootstrap, cfg.all_topics, cfg.topic_partitions))
    records = audit_records(2000)
    sink = Child(["sink"], to_env(cfg), tmp_path / "sink.log")
    try:
        sink.wait_healthy(cfg.sink_http_port)
        asyncio.run(produce(bootstrap, cfg.audit_topic, records[:1000]))
        endpoint = Endpoint(f"http://127.0.0.1:{cfg.sink_http_port}/sql", "s3cret")
        deadline = time.monotonic() + 30
        while run_query(cfg.db_path, "SELECT count(*) FROM audit_log", endpoint=endpoint).rows != [(1000,)]:
            assert time.monotonic() < deadline, sink.tail()
            time.sleep(0.1)

        # the same from another process, through the CLI (the file is held by the sink)
        out = cli(cfg, "query", "--format", "json", "SELECT count(*) AS n FROM findings")
        assert out.returncode == 0, out.stderr
        assert orjson.loads(out.stdout) == [{"n": 1000}]
        named = cli(cfg, "query", "--name", "findings_in_window", "--param", "start=0", "--param", "end=10",
                    "--format", "csv")  # fmt: skip
        assert named.returncode == 0 and len(named.stdout.splitlines()) == 11, named.stderr

        # read-only, and the token is required
        for sql in (
            "DELETE FROM audit_log",
            "COPY audit_log TO '/tmp/x.csv'",
            "SELECT * FROM read_text('/etc/hostname')",
        ):
            with pytest.raises(QueryError):
                run_query(cfg.db_path, sql, endpoint=endpoint)
        with pytest.raises(QueryError, match="bearer token"):
            run_query(cfg.db_path, "SELECT 1", endpoint=Endpoint(endpoint.url, "wrong"))

        # a second half arrives while we watch; then a clean stop writes a final checkpoint
        asyncio.run(produce(bootstrap, cfg.audit_topic, records[1000:]))
        while run_query(cfg.db_path, "SELECT count(*) FROM audit_log", endpoint=endpoint).rows != [(2000,)]:
            assert time.monotonic() < deadline + 30, sink.tail()
            time.sleep(0.1)
    finally:
        assert sink.stop() == 0, sink.tail()

    report = verify(cfg.db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
    assert report.problems == [] and report.records == 2000 and report.checkpoints >= 2
    published = asyncio.run(read_all(bootstrap, cfg.checkpoint_topic, report.checkpoints))
    file_lines = [orjson.loads(line) for line in cfg.checkpoint_path.read_bytes().splitlines()]
    assert [orjson.loads(m.value) for m in published] == file_lines
    out = cli(cfg, "verify")
    assert out.returncode == 0 and "OK: the audit trail matches" in out.stdout, out.stdout + out.stderr


def test_sql_beyond_loopback_needs_a_token(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings.model_copy(update={"http_host": "0.0.0.0", "sql_token": ""})
    out = cli(cfg, "sink")
    assert out.returncode == 1
    assert "set DRIFTLOG_SQL_TOKEN" in out.stderr
