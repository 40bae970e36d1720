"""Operability shared by the long-running processes: Prometheus metrics and a health/metrics HTTP server."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from streams.errors import ConfigError


def _registry() -> CollectorRegistry:
    """A process's own metrics: each long-running process serves only the metrics it updates."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


WORKER_METRICS = _registry()
SINK_METRICS = _registry()

SAMPLES = Counter(
    "driftlog_samples_total", "Valid telemetry samples processed, by kind", ["kind"], registry=WORKER_METRICS
)
MESSAGES = Counter("driftlog_messages_total", "Kafka messages consumed, by topic", ["topic"], registry=WORKER_METRICS)
DEAD_LETTERS = Counter(
    "driftlog_dead_letters_total", "Rejected messages or samples, by reason", ["reason"], registry=WORKER_METRICS
)
FINDINGS = Counter("driftlog_findings_total", "Findings emitted, by kind", ["kind"], registry=WORKER_METRICS)
AFTER_FAILURES = Counter(
    "driftlog_after_message_failures_total",
    "Failures after a message was processed (its metrics, a commit's timing; the message is kept)",
    registry=WORKER_METRICS,
)
LAST_MESSAGE = Gauge(
    "driftlog_last_message_timestamp_seconds",
    "Unix time the worker last processed a message of its own input (telemetry, metrics)",
    registry=WORKER_METRICS,
)
INPUT_END = Gauge(
    "driftlog_input_end_timestamp_seconds",
    "Unix time the worker last ended its input (its idle flush: every epoch released, every job closed)",
    registry=WORKER_METRICS,
)
INPUT_END_WAIT = Gauge(
    "driftlog_input_end_wait_seconds",
    "Seconds the worker waited before it last ended its input: from its last input message (of any topic) to "
    "the timer round of its idle flush, less the work in between (driftlog_input_end_work_seconds); about "
    "DRIFTLOG_IDLE_FLUSH_S plus up to two DRIFTLOG_STATE_INTERVAL_S: a wait, not work (0: no input)",
    registry=WORKER_METRICS,
)
INPUT_END_WORK = Gauge(
    "driftlog_input_end_work_seconds",
    "Seconds the worker worked between its last input message and the timer round that last ended its input "
    "(ticks that released or emitted, commits): the part of that time that was not a wait",
    registry=WORKER_METRICS,
)
INPUT_END_ROUND = Gauge(
    "driftlog_input_end_round_seconds",
    "Seconds the timer round that last ended the worker's input took (its idle flushes and commits: work)",
    registry=WORKER_METRICS,
)
CONSUMER_LAG = Gauge(
    "driftlog_consumer_lag", "Records not yet processed, per partition", ["topic", "partition"], registry=WORKER_METRICS
)
SINK_LAG = Gauge(
    "driftlog_consumer_lag", "Records not yet stored, per partition", ["topic", "partition"], registry=SINK_METRICS
)
SINK_ROWS = Counter("driftlog_sink_rows_total", "Audit records written to the store", registry=SINK_METRICS)
CHECKPOINTS = Counter(
    "driftlog_checkpoints_total", "Signed checkpoints of the chain heads written", registry=SINK_METRICS
)
SINK_COMMIT_SECONDS = Histogram(
    "driftlog_sink_commit_seconds",
    "Duration of one sink transaction (rows + offsets)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=SINK_METRICS,
)

SNAPSHOT_BYTES = Histogram(
    "driftlog_worker_snapshot_bytes",
    "Size of one worker task's state snapshot as written (compressed)",
    buckets=(1e3, 1e4, 1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8),
    registry=WORKER_METRICS,
)
SNAPSHOT_SECONDS = Histogram(
    "driftlog_worker_snapshot_seconds",
    "Time to encode one worker task's state snapshot (the worker's event loop waits meanwhile)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=WORKER_METRICS,
)

HealthFn = Callable[[], tuple[bool, dict[str, Any]]]


async def start_http(
    host: str,
    port: int,
    health: HealthFn,
    routes: Sequence[web.RouteDef] = (),
    registry: CollectorRegistry = WORKER_METRICS,
) -> tuple[web.AppRunner, int]:
    """Serve ``/health`` (200 when healthy, else 503, JSON details) and ``/metrics`` (``registry``: the
    process's own metrics). Returns the bound port; a port in use is a one-line :class:`ConfigError`."""

    async def health_view(_: web.Request) -> web.Response:
        ok, details = health()
        return web.json_response({"status": "ok" if ok else "unhealthy", **details}, status=200 if ok else 503)

    async def metrics_view(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/health", health_view)
    app.router.add_get("/metrics", metrics_view)
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"cannot serve health/metrics on {host}:{port}: {exc.strerror or exc}; stop the process using it, or "
            "set DRIFTLOG_WORKER_HTTP_PORT / DRIFTLOG_SINK_HTTP_PORT to a free port (0: any)"
        ) from exc
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, int(bound)
