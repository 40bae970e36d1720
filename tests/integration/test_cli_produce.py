"""`driftlog produce` as a new user runs it: rows without a kind send nothing and say so (exit 1); a file
sent again under the same source is warned about (the worker would drop it as duplicates); --source
names a new one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from streams.config import Settings, to_env
from streams.kafka.admin import ensure_topics

pytestmark = pytest.mark.integration


def produce(cfg: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "streams.cli", "produce", *args], capture_output=True, text=True,
                          env={**os.environ, **to_env(cfg)}, timeout=120, check=False)  # fmt: skip


def test_rows_without_a_kind_send_nothing_and_say_so(fresh_settings: Settings, tmp_path: Path) -> None:
    asyncio.run(ensure_topics(fresh_settings.kafka_bootstrap_servers, fresh_settings.all_topics, 1))
    rows = tmp_path / "metrics.jsonl"
    rows.write_text('{"entity": "gpu:0", "name": "util", "value": 0.5, "time": 1767225600}\n')
    proc = produce(fresh_settings, str(rows))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.splitlines()[-1] == "driftlog: error: nothing was sent: 1 rows were skipped; rows without a "
        "kind column need --kind"
    )
    assert produce(fresh_settings, str(rows), "--kind", "metric").returncode == 0


def test_a_resent_source_is_warned_about(fresh_settings: Settings, tmp_path: Path) -> None:
    asyncio.run(ensure_topics(fresh_settings.kafka_bootstrap_servers, fresh_settings.all_topics, 1))
    rows = tmp_path / "metrics.jsonl"
    rows.write_text('{"kind": "metric", "entity": "gpu:0", "name": "util", "value": 0.5, "time": 1767225600}\n')
    first = produce(fresh_settings, str(rows))
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr
    again = produce(fresh_settings, str(rows))
    assert again.returncode == 0
    assert "source 'produce:metrics.jsonl' already sent 1 messages" in again.stderr
    assert "--source" in again.stderr
    renamed = produce(fresh_settings, str(rows), "--source", "produce:metrics-2")
    assert renamed.returncode == 0 and "warning" not in renamed.stderr
