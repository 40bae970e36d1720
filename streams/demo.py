"""``driftlog demo``: the whole live path on a real broker, then the story told from SQL."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from audit.checkpoint import public_key_path
from audit.queries import named
from audit.query import run_query
from audit.verify import verify
from streams.config import Settings, to_env
from streams.errors import DriftlogError
from streams.kafka.admin import ensure_topics, group_lag
from streams.kafka.launcher import LocalKafka
from streams.sim.scenarios import training_fabric
from streams.supervise import Child, free_port

Echo = Callable[[str], None]


def namespaced(settings: Settings, prefix: str, db_path: Path) -> Settings:
    """Fresh topic names and groups (so a run never sees an earlier run's data), free loopback ports, and a
    short idle flush (a demo's or test's input ends: its last steps should not wait 30 s)."""
    return settings.model_copy(
        update={
            "telemetry_topic": f"{prefix}.telemetry",
            "decisions_topic": f"{prefix}.decisions",
            "audit_topic": f"{prefix}.audit",
            "dead_letter_topic": f"{prefix}.dead-letter",
            "checkpoint_topic": f"{prefix}.checkpoints",
            "state_topic": f"{prefix}.worker-state",
            "shared_topic": f"{prefix}.shared",
            "idle_flush_s": 2.0,
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


def input_ended(port: int) -> bool:
    """Whether the worker has ended its input (idle past DRIFTLOG_IDLE_FLUSH_S) and committed what followed."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return bool(orjson.loads(response.read()).get("input_ended"))
    except (OSError, ValueError):
        return False


async def wait_drained(
    settings: Settings, children: list[Child], timeout: float, echo: Echo, worker: bool = True
) -> None:
    """Wait until the worker has consumed all telemetry and ended its input (idle flush), and after that the
    sink has stored all audit records."""
    bootstrap = settings.kafka_bootstrap_servers
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            child.check_alive()
        worker_lag = 0
        if worker:
            worker_lag = sum((await group_lag(bootstrap, settings.worker_group, [settings.telemetry_topic])).values())
        if not worker or (worker_lag == 0 and await asyncio.to_thread(input_ended, settings.worker_http_port)):
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
        scenario = training_fabric(seed=1, ranks=64, steps=300)
        messages = list(scenario.run())
        bad = [b"{not json", b'{"schema": "driftlog.telemetry/9", "samples": []}']
        telemetry = [v for kind, _, v in messages if kind == "telemetry"] + bad
        decisions = [v for kind, _, v in messages if kind == "decisions"]
        asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.telemetry_topic, telemetry, key=scenario.job.encode()))
        asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.decisions_topic, decisions, key=scenario.job.encode()))
        truth = scenario.ground_truth(1)
        cause, cap = truth["causes"]
        echo(f"• simulated training job {scenario.job!r}: {truth['layout']['ranks']} ranks (dp×pp×tp = "
             f"{truth['layout']['dp']}×{truth['layout']['pp']}×{truth['layout']['tp']}, 1F1B), {scenario.steps} steps, "
             f"{scenario.samples:,} samples; injected: {cause['element']} ×{cause['magnitude']} compute from step "
             f"{cause['start_step']}, then a power cap on its node at step {cap['start_step']}; plus {len(bad)} "
             "malformed messages")  # fmt: skip
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
    """What degraded, which element and which decision, what it cost: told from SQL over the audit trail."""
    total = run_query(db_path, "SELECT count(*) FROM audit_log").rows[0][0]
    echo(f"What the audit trail says ({total:,} audit records):")
    drift = run_query(
        db_path,
        "SELECT id, subjects[1] AS job, severity, CAST(evidence->>'onset_step' AS INTEGER) AS onset,"
        " CAST(evidence->>'baseline_step_s' AS DOUBLE) AS base FROM findings WHERE kind = 'step_time_drift'"
        " ORDER BY start_time",
    ).records()
    for f in drift:
        echo(f"  ▸ what degraded: {f['job']} step time rose ×{f['severity']:.2f} over its healthy {f['base']:.3f}s,"
             f" from step {f['onset']}")  # fmt: skip
        causes = named_records(db_path, "finding_causes", finding_id=f["id"])
        if causes:
            top = causes[0]
            after = ", ".join(c["cause"] for c in causes[1:3])
            echo(f"  ▸ which element: {top['cause']} — healing it alone would make the step ×{top['slowdown']:.2f} "
                 f"faster (what-if on the step dependency graph); next: {after}")  # fmt: skip
    for f in _findings(db_path, "straggler"):
        where = f" on {f['subjects'][1]}" if len(f["subjects"]) > 1 else ""
        echo(f"  ▸ the straggler: {f['subjects'][0]}{where} arrives {f['severity'] * 1000:.0f} ms late at its "
             "all-reduces (lateness of arrival, not op duration)")  # fmt: skip
    for f in _findings(db_path, "straggler_cascade"):
        ev = f["evidence"]
        echo(f"  ▸ the cascade: it holds up {ev['affected_ranks']} ranks — {ev['via_tensor_parallel']} tensor-"
             f"parallel peers, {ev['via_pipeline']} through the pipeline, {ev['via_collectives']} through "
             "all-reduces")  # fmt: skip
    for f in _findings(db_path, "control_regression"):
        ev = f["evidence"]
        for c in named_records(db_path, "finding_causes", finding_id=f["id"]):
            if c["cause_kind"] == "decision":
                echo(f"  ▸ which decision: {c['decided_by']} did {c['decision_action']} on {f['subjects'][0]} "
                     f"({c['cause']}): step time {ev['step_s_before']:.3f}s → {ev['step_s_after']:.3f}s, "
                     f"{c['share']:.0%} of the rise through {ev['element']}; {c['cost_accel_s']:.0f} "
                     f"accelerator-s over the {ev['steps_compared']} steps compared")  # fmt: skip
    cost = run_query(
        db_path,
        "SELECT window_start, mean FROM metrics_rollup WHERE name = 'accel_s_per_output' ORDER BY window_start",
    ).rows
    if len(cost) >= 2:
        first, last = cost[0][1], cost[-1][1]
        echo(f"  ▸ what it cost: accelerator-seconds per token {first * 1e6:.2f}µs → {last * 1e6:.2f}µs "
             f"(×{last / first:.2f}) from the first to the last window of 50 steps")  # fmt: skip
    waste = named_records(db_path, "wasted_by_cause", job="%")
    if waste:
        by_cause: dict[str, float] = {}
        for w in waste:
            by_cause[w["cause"]] = by_cause.get(w["cause"], 0.0) + w["wasted_accel_s"]
        listed = ", ".join(
            f"{c.removeprefix('cause:')} {v:,.0f}" for c, v in sorted(by_cause.items(), key=lambda kv: -kv[1])
        )
        echo(f"  ▸ where the accelerator-seconds went to waste: {listed}")
    if not drift:
        echo("  no degradation found")
    for reason, n in run_query(db_path, "SELECT reason, count(*) FROM dead_letters GROUP BY ALL ORDER BY 1").rows:
        echo(f"  ▸ dead-lettered: {n} × {reason} (original bytes on the dead-letter topic)")


def _findings(db_path: Path, kind: str) -> list[dict[str, Any]]:
    found = run_query(
        db_path,
        "SELECT id, subjects, severity, start_time, evidence FROM findings WHERE kind = $kind ORDER BY start_time",
        {"kind": kind},
    ).records()
    return [{**f, "evidence": orjson.loads(f["evidence"])} for f in found]


def named_records(db_path: Path, name: str, **params: object) -> list[dict[str, Any]]:
    """A named query of sql/queries (the same library `driftlog query --name` runs) as records."""
    return run_query(db_path, named(name).sql, params).records()


def _step_time_around(db_path: Path, t: float) -> tuple[float | None, float | None]:
    """Mean step time in the roll-up window before ``t`` and the first one wholly after it."""
    rows = run_query(
        db_path,
        "SELECT (SELECT mean FROM metrics_rollup WHERE name = 'step_s' AND window_end <= $t"
        "        ORDER BY window_end DESC LIMIT 1),"
        " (SELECT mean FROM metrics_rollup WHERE name = 'step_s' AND window_start >= $t"
        "        ORDER BY window_start LIMIT 1)",
        {"t": t},
    ).rows
    return rows[0][0], rows[0][1]
