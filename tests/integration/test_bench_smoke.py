"""`make bench-smoke`: the benchmark suite's one-minute form runs end to end on the real broker and writes its
figures (printed; no speed is asserted: these machines are shared and noisy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.config import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke_prints_every_figure(fresh_settings: Settings, tmp_path: Path) -> None:
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
