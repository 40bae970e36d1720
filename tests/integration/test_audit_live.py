"""The audit store while it runs: SQL from another process, signed checkpoints, verify afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from audit.checkpoint import fingerprint, load_public_key, public_key_path
from audit.query import Endpoint, run_query
from audit.verify import verify
from streams.config import Settings, to_env
from streams.demo import produce
from streams.errors import QueryError
from streams.kafka.admin import ensure_topics
from streams.supervise import Child
from tests.hidden_writes import HIDDEN_WRITES, corpus
from tests.integration.helpers import read_all
from tests.integration.test_sink_exactly_once import audit_records

pytestmark = pytest.mark.integration


def cli(cfg: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], env={**os.environ, **to_env(cfg)},
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_query_while_running_checkpoints_and_verify(fresh_settings: Settings, tmp_path: Path) -> None:
    witness = tmp_path / "elsewhere" / "witness.jsonl"
    cfg = fresh_settings.model_copy(
        update={"checkpoint_interval_s": 0.5, "sql_token": "s3cret", "checkpoint_witness": witness}
    )
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
    assert witness.read_bytes() == cfg.checkpoint_path.read_bytes()

    # the CLI compares with the topic and the witness, and wants the key pinned
    unpinned = cli(cfg, "verify")
    assert unpinned.returncode == 2 and "no pinned checkpoint key" in unpinned.stdout, unpinned.stdout
    pin = fingerprint(load_public_key(public_key_path(cfg.signing_key_path)))
    pinned = cfg.model_copy(update={"checkpoint_key_fingerprint": pin})
    out = cli(pinned, "verify")
    assert out.returncode == 0 and "OK: the audit trail matches" in out.stdout, out.stdout + out.stderr

    # the file trimmed (and the DB rolled back with it) is caught by the topic, even without the witness
    shutil.copy(cfg.checkpoint_path, tmp_path / "full.jsonl")
    cfg.checkpoint_path.write_bytes(
        b"".join(line + b"\n" for line in cfg.checkpoint_path.read_bytes().splitlines()[:1])
    )
    trimmed = cli(pinned.model_copy(update={"checkpoint_witness": None}), "verify")
    assert trimmed.returncode == 2 and "that the checkpoints topic" in trimmed.stdout, trimmed.stdout
    offline = cli(pinned.model_copy(update={"checkpoint_witness": None}), "verify", "--offline")
    assert "NOTE: not compared with the checkpoints topic" in offline.stdout, offline.stdout
    unreachable = cli(pinned.model_copy(update={"kafka_bootstrap_servers": "127.0.0.1:1"}), "verify")
    assert unreachable.returncode == 2 and "cannot read the checkpoints topic" in unreachable.stdout


def test_hidden_writes_against_the_live_endpoint_change_nothing(fresh_settings: Settings, tmp_path: Path) -> None:
    """The corpus through the running sink's POST /sql: every form is refused, and the store's bytes, its
    chain heads and the checkpoint file are the same afterwards; verify (topic compared) is OK."""
    cfg = fresh_settings.model_copy(update={"checkpoint_interval_s": 0.3, "sql_token": "s3cret"})
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    sink = Child(["sink"], to_env(cfg), tmp_path / "sink.log")
    endpoint = Endpoint(f"http://127.0.0.1:{cfg.sink_http_port}/sql", "s3cret")
    try:
        sink.wait_healthy(cfg.sink_http_port)
        asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(500)))
        deadline = time.monotonic() + 30
        # quiet: every record stored, checkpointed and in the snapshot
        while run_query(cfg.db_path, "SELECT (SELECT count(*) FROM audit_log), (SELECT count(*) FROM checkpoints)",
                        endpoint=endpoint).rows[0][0] != 500 or not cfg.checkpoint_path.exists():  # fmt: skip
            assert time.monotonic() < deadline, sink.tail()
            time.sleep(0.2)
        time.sleep(1.5)
        before = _state(cfg)
        refused = 0
        for sql in corpus(str(cfg.db_path)):
            try:
                run_query(cfg.db_path, sql, endpoint=endpoint)
            except QueryError:
                refused += 1
        time.sleep(1.0)
        assert (refused, _state(cfg)) == (len(HIDDEN_WRITES), before)
        assert run_query(cfg.db_path, "SELECT count(*) FROM findings", endpoint=endpoint).rows == [(500,)]
    finally:
        assert sink.stop() == 0, sink.tail()
    pin = fingerprint(load_public_key(public_key_path(cfg.signing_key_path)))
    out = cli(cfg.model_copy(update={"checkpoint_key_fingerprint": pin}), "verify")
    assert out.returncode == 0 and "OK: the audit trail matches" in out.stdout, out.stdout + out.stderr


def _state(cfg: Settings) -> tuple[str, ...]:
    files = sorted(p for p in cfg.db_path.parent.glob(cfg.db_path.name + "*") if p.is_file())
    files.append(cfg.checkpoint_path)
    return tuple(f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in files)


def test_sql_beyond_loopback_needs_a_token(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings.model_copy(update={"http_host": "0.0.0.0", "sql_token": ""})
    out = cli(cfg, "sink")
    assert out.returncode == 1
    assert "set DRIFTLOG_SQL_TOKEN" in out.stderr
