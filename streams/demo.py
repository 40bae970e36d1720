"""``driftlog demo``: the whole live path on a real broker, then the story told from SQL."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaProducer

from audit.checkpoint import public_key_path
from audit.query import run_query
from audit.verify import verify
from streams.config import Settings, to_env
from streams.errors import DriftlogError
from streams.kafka.admin import ensure_topics, group_lag
from streams.kafka.launcher import LocalKafka
from streams.supervise import Child, free_port
from streams.synthetic import SyntheticJob

Echo = Callable[[str], None]


def namespaced(settings: Settings, prefix: str, db_path: Path) -> Settings:
    """Fresh topic names and groups (so a run never sees an earlier run's data), free loopback ports."""
    return settings.model_copy(
        update={
            "telemetry_topic": f"{prefix}.telemetry",
            "decisions_topic": f"{prefix}.decisions",
            "audit_topic": f"{prefix}.audit",
            "dead_letter_topic": f"{prefix}.dead-letter",
            "worker_group": f"{prefix}-worker",
            "sink_group": f"{prefix}-sink",
            "db_path": db_path,
            "worker_http_port": free_port(),
            "sink_http_port": free_port(),
        }
    )


async def produce(bootstrap: str, topic: str, messages: list[bytes], key: bytes | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for m in messages:
            await producer.send(topic, m, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def start_services(cfg: Settings, logs: Path) -> list[Child]:
    """Start worker and sink as child processes and wait until both report healthy."""
    env = to_env(cfg)
    logs.mkdir(parents=True, exist_ok=True)
    children = [Child(["worker"], env, logs / "worker.log"), Child(["sink"], env, logs / "sink.log")]
    try:
        children[0].wait_healthy(cfg.worker_http_port)
        children[1].wait_healthy(cfg.sink_http_port)
    except BaseException:
        for child in children:
            child.stop(grace=5)
        raise
    return children


async def wait_drained(settings: Settings, children: list[Child], timeout: float, echo: Echo) -> None:
    """Wait until the worker has consumed all telemetry and, after that, the sink all audit records."""
    bootstrap = settings.kafka_bootstrap_servers
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            child.check_alive()
        worker_lag = sum((await group_lag(bootstrap, settings.worker_group, [settings.telemetry_topic])).values())
        if worker_lag == 0:
            sink_lag = sum((await group_lag(bootstrap, settings.sink_group, [settings.audit_topic])).values())
            if sink_lag == 0:
                return
        if time.monotonic() > deadline:
            raise DriftlogError(f"pipeline did not drain within {timeout:.0f}s (worker lag {worker_lag})")
        await asyncio.sleep(0.5)


def run_demo(settings: Settings, db_path: Path, echo: Echo, timeout: float = 240.0) -> None:
    broker: LocalKafka | None = None
    if not settings.kafka_bootstrap_servers:
        broker = LocalKafka(settings.kafka_home, settings.kafka_version, name="demo")
        echo(f"• starting a local Apache Kafka {settings.kafka_version} broker (the first run fetches it with Maven)")
        settings = settings.model_copy(update={"kafka_bootstrap_servers": broker.start().bootstrap})
    echo(f"• Kafka at {settings.kafka_bootstrap_servers}")
    run = f"driftlog-demo-{uuid.uuid4().hex[:8]}"
    cfg = namespaced(settings, run, db_path)
    for old in (db_path, db_path.with_name(db_path.name + ".wal"), cfg.checkpoint_path):
        old.unlink(missing_ok=True)  # a fresh trail each run (its checkpoints belong to it)
    logs = Path(tempfile.mkdtemp(prefix="driftlog-demo-logs-"))
    children: list[Child] = []
    try:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        job = SyntheticJob()
        bad = [b"{not json", b'{"schema": "driftlog.telemetry/9", "samples": []}']
        asyncio.run(
            produce(
                cfg.kafka_bootstrap_servers,
                cfg.telemetry_topic,
                [*job.messages(), *bad],
                key=job.job.encode(),
            )
        )
        echo(
            f"• streamed job {job.job!r}: {job.steps} steps, slowdown ×{job.slowdown} injected from step "
            f"{job.slow_from}, plus {len(bad)} malformed messages"
        )
        children = start_services(cfg, logs)
        echo("• worker and audit sink running; waiting until everything is in DuckDB")
        asyncio.run(wait_drained(cfg, children, timeout, echo))
        for child in children:
            code = child.stop()
            if code != 0:
                raise DriftlogError(f"`driftlog {child.args[0]}` exited with {code} on SIGTERM:\n{child.tail()}")
        children = []
        report = verify(db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
        state = "intact" if report.ok else "NOT intact: " + "; ".join(report.problems[:2])
        echo(f"• stopped cleanly; audit trail in {db_path}: {report.records} records, "
             f"{report.checkpoints} signed checkpoints, hash chains {state}\n")  # fmt: skip
        tell_story(db_path, echo)
    finally:
        for child in children:
            child.stop(grace=5)
        if broker is not None:
            broker.stop()
            echo("• local broker stopped")
        shutil.rmtree(logs, ignore_errors=True)


def tell_story(db_path: Path, echo: Echo) -> None:
    """The findings, told from SQL over the audit trail."""
    findings = run_query(
        db_path,
        "SELECT kind, subjects[1] AS subject, severity, evidence->>'onset_step' AS onset,"
        " evidence->>'detected_at_step' AS detected, CAST(evidence->>'baseline_step_s' AS DOUBLE) AS base,"
        " CAST(evidence->>'observed_step_s' AS DOUBLE) AS seen, CAST(cost->>'extra_step_seconds' AS DOUBLE) AS extra"
        " FROM findings ORDER BY start_time",
    ).records()
    dead = run_query(db_path, "SELECT reason, count(*) AS n FROM dead_letters GROUP BY reason ORDER BY reason").rows
    total = run_query(db_path, "SELECT count(*) FROM audit_log").rows[0][0]
    echo(f"What the audit trail says ({total} audit records):")
    if not findings:
        echo("  no degradation found")
    for f in findings:
        echo(
            f"  ▸ {f['kind']} on {f['subject']}: step time {f['base']:.3f}s → {f['seen']:.3f}s "
            f"(×{f['severity']:.2f}), began at step {f['onset']}, detected at step {f['detected']}"
        )
        echo(f"    cost so far: {f['extra']:.1f} extra step-seconds for the whole job")
    for reason, n in dead:
        echo(f"  ▸ dead-lettered: {n} × {reason} (original bytes on the dead-letter topic)")
