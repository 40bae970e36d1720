"""`make bench-smoke`: the benchmark suite's one-minute form runs end to end on the real broker and writes its
figures (printed; no speed is asserted: these machines are shared and noisy), and leaves none of the topics it
created behind (a broker that keeps them all ends up too slow to start)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.config import Settings
from streams.kafka.admin import delete_topics, ensure_topics, list_topics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke_prints_every_figure(fresh_settings: Settings, tmp_path: Path) -> None:
    before = topics(fresh_settings.kafka_bootstrap_servers)
    out = tmp_path / "smoke.json"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": fresh_settings.kafka_bootstrap_servers}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "suite.py"), "--smoke", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())["figures"]
    for name in ("in-process engine", "raw ceiling (aiokafka + orjson)", "live, 1 worker: to lag 0",
                 "live, 2 workers: to lag 0", "replay (whole range)", "analyze (JSONL of envelopes)",
                 "sink, Kafka -> DuckDB", "RSS, 1,024 ranks, lateness 30 s",
                 "finding latency, low latency, 16 ranks in real time: p99"):  # fmt: skip
        assert figures[name]["median"] > 0, name
    for workers in ("1 worker", "2 workers"):  # the live runs wrote what the in-process run writes
        assert figures[f"live, {workers}: records stored / expected"]["median"] == 1.0
        assert figures[f"workers, balanced jobs, {workers}: records stored / expected"]["median"] == 1.0
    assert "figure" in done.stdout and "machine:" in done.stdout
    assert created_since(fresh_settings.kafka_bootstrap_servers, before) == set()


def test_bench_settings_deletes_the_topics_named_under_its_prefix(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own topics and those a run derives from their names (``<topic>-<tag>``); no other topic; and its
    work directory."""
    from bench._broker import bench_settings

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    other = f"not-bench-{time.monotonic_ns()}"
    asyncio.run(ensure_topics(kafka_bootstrap, [other], 1))
    before = topics(kafka_bootstrap)
    with bench_settings() as cfg:
        made = [*cfg.all_topics, f"{cfg.telemetry_topic}-2w-1"]
        asyncio.run(ensure_topics(kafka_bootstrap, made, 2))
        assert set(made) <= topics(kafka_bootstrap)
        work = cfg.db_path.parent
        assert work.is_dir()
    try:
        assert not work.exists()
        assert created_since(kafka_bootstrap, before) == set()
        assert other in topics(kafka_bootstrap)
    finally:
        asyncio.run(delete_topics(kafka_bootstrap, [other]))


def topics(bootstrap: str) -> set[str]:
    return asyncio.run(list_topics(bootstrap))


def created_since(bootstrap: str, before: set[str], wait_s: float = 15.0) -> set[str]:
    """Topics that exist now and did not in ``before``, once the broker's deletions have settled; not the
    broker's own (``__transaction_state`` appears with the first transaction on a fresh broker)."""
    deadline = time.monotonic() + wait_s
    while (left := {t for t in topics(bootstrap) - before if not t.startswith("__")}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
