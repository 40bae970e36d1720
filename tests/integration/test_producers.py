"""The producer SDK (sync and async) and `driftlog produce` against a real broker, through worker and sink."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.query import run_query
from streams.client import AsyncProducer, Producer
from streams.config import Settings, to_env
from streams.contract.envelope import decode_telemetry
from streams.demo import start_services, wait_drained
from streams.kafka.admin import ensure_topics
from streams.synthetic import SyntheticJob
from tests.integration.helpers import read_all

pytestmark = pytest.mark.integration


def test_sdk_and_file_import_reach_the_audit_trail(fresh_settings: Settings, tmp_path: Path) -> None:
    # the producers below send minutes of event time one after the other, some on the same partition:
    # out of order by more than the default lateness, so this deployment allows more
    cfg = fresh_settings.model_copy(update={"allowed_lateness_s": 600.0})
    bootstrap = cfg.kafka_bootstrap_servers
    asyncio.run(ensure_topics(bootstrap, cfg.all_topics, cfg.topic_partitions))
    topics = {"telemetry_topic": cfg.telemetry_topic, "decisions_topic": cfg.decisions_topic}

    # a training loop, synchronous: the slowdown must be found
    job = SyntheticJob(job="sdk-job")
    with Producer(bootstrap, source="trainer-0", max_samples=64, **topics) as p:
        for s in job.samples():
            p.step(**{k: v for k, v in s.items() if k != "kind"})

    # a controller, asyncio
    async def controller() -> None:
        async with AsyncProducer(bootstrap, source="power-manager", **topics) as p:
            await p.decision(id="cap-1", time=job.t0 + 100, controller="power-manager/rack7", layer="power",
                             action="power_cap", targets=["node:n7"], parameters={"cap_w": 450},
                             expected_effect={"metric": "power_w", "direction": "down"})  # fmt: skip
            await p.metric(entity="device:n7/gpu0", name="power_w", value=450.0, time=job.t0 + 101)

    asyncio.run(controller())

    # exported files with other column names and units
    jsonl = tmp_path / "decisions.jsonl"
    jsonl.write_bytes(
        orjson.dumps(
            {
                "id": "scale-1",
                "time": job.t0 + 50,
                "controller": "hpa/router",
                "layer": "autoscaler",
                "action": "scale_out",
                "targets": ["service:router"],
            }
        )
        + b"\n{this line is broken\n"
        + orjson.dumps(
            {"id": "bad-1", "time": job.t0, "controller": "x", "layer": "weather", "action": "a", "targets": []}
        )
        + b"\n"
    )
    parquet = tmp_path / "trace.parquet"
    n = 1000
    pq.write_table(
        pa.table({"rank_id": list(range(n)), "name": ["allreduce"] * n, "cls": ["comm"] * n,
                  "ts": [job.t0 + i * 1e-3 for i in range(n)], "dur_ms": [12.5] * n, "iteration": [3] * n}),
        parquet,
    )  # fmt: skip
    env = {**to_env(cfg), "PYTHONUNBUFFERED": "1"}
    runs = []
    for args in (
        [str(jsonl), "--kind", "decision"],
        [str(parquet), "--kind", "op", "--map", "rank_id=rank", "--map", "name=op", "--map", "cls=op_class",
         "--map", "ts=start", "--map", "dur_ms=duration", "--map", "iteration=step", "--scale", "duration=0.001",
         "--set", "job=imported", "--batch", "400"],
    ):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "streams.cli", "produce", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        runs.append(proc)
    assert runs[0].stdout.strip() == "sent no samples and 2 decisions"
    assert "skipped 1 unreadable rows" in runs[0].stderr and "decisions.jsonl:2: not JSON" in runs[0].stderr
    assert runs[1].stdout.strip() == "sent 1,000 op and 0 decisions"

    ops = [decode_telemetry(m.value) for m in asyncio.run(read_all(bootstrap, cfg.telemetry_topic, 10_000))]
    op_batches = [b for d in ops for b in d.batches if b.kind == "op"]
    assert sum(len(b) for b in op_batches) == n and all(d.rejects == [] for d in ops)
    assert {float(x) for b in op_batches for x in b.columns["duration"]} == {0.0125}
    assert len(op_batches) == 3  # 1000 rows at 400 per message

    children = start_services(cfg, tmp_path / "logs")
    try:
        asyncio.run(wait_drained(cfg, children, 120, print))
    finally:
        assert [c.stop() for c in children] == [0, 0]
    assert run_query(cfg.db_path, "SELECT id, layer FROM decisions ORDER BY id").rows == [
        ("cap-1", "power"), ("scale-1", "autoscaler")
    ]  # fmt: skip
    assert run_query(cfg.db_path, "SELECT reason, source_topic FROM dead_letters").rows == [
        ("out_of_range", cfg.decisions_topic)
    ]
    findings = run_query(cfg.db_path, "SELECT subjects FROM findings").rows
    assert findings == [(["job:sdk-job"],)]
