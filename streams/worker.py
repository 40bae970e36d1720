"""The Faust worker: thin agents around :class:`streams.pipeline.Processor`.

Delivery: at-least-once into the audit topic. Faust acks a message when the agent moves past it and,
before it commits offsets, flushes the producer; so an audit record is on the broker before the input
offset it came from is committed. Record ids are content-derived, so a re-delivered input yields the same
records again (the sink keeps the first). Nothing in the agent may raise on bad input (Faust would ack
and skip the message): the processor turns every input problem into a dead letter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import faust
from mode import Service

from audit.records import SourcePosition
from streams import ops
from streams.config import Settings
from streams.contract.admission import Admission
from streams.contract.envelope import Reject
from streams.engine.engine import Engine, EngineConfig
from streams.logs import config_dict
from streams.pipeline import Output, Processor

log = logging.getLogger("driftlog.worker")


def broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{hp.strip()}" for hp in bootstrap.split(",") if hp.strip()]


class OpsService(Service):
    """Health and metrics endpoint living inside the worker's event loop."""

    def __init__(self, app: faust.App, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.settings = settings
        self.runner: Any = None
        self.port = 0
        self.processed: dict[tuple[str, int], int] = {}

    async def on_start(self) -> None:
        self.runner, self.port = await ops.start_http(
            self.settings.http_host, self.settings.worker_http_port, self.health
        )
        log.info("worker health/metrics listening", extra={"port": self.port})

    async def on_stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy once the worker has joined its group and is not in the middle of a rebalance."""
        app = self.app
        consumer = app.consumer if app.producer is not None else None
        assigned = sorted(f"{tp.topic}/{tp.partition}" for tp in consumer.assignment()) if consumer else []
        joined = app.rebalancing_count > 0 and not app.rebalancing
        details = {"role": "worker", "assigned": assigned, "rebalancing": app.rebalancing}
        return (joined and not app.should_stop, details)

    def observe(self, topic: str, partition: int, offset: int) -> None:
        """Record progress and refresh the lag gauge (highwater minus the next offset to process)."""
        self.processed[(topic, partition)] = offset
        highwater = self.app.consumer.highwater(_tp(topic, partition))
        if highwater is not None:
            ops.CONSUMER_LAG.labels(topic, str(partition)).set(max(0, highwater - offset - 1))


def _tp(topic: str, partition: int) -> Any:
    from faust.types import TP

    return TP(topic, partition)


def build_app(settings: Settings) -> tuple[faust.App, OpsService]:
    """Create the Faust application, register its agents; also return the ops service to run beside it."""
    app = faust.App(
        settings.worker_group,
        broker=broker_urls(settings.kafka_bootstrap_servers),
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        datadir=str(settings.home / "worker" / settings.worker_group),
        topic_partitions=settings.topic_partitions,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        broker_commit_every=1000,
        broker_commit_interval=1.0,
    )
    telemetry = app.topic(settings.telemetry_topic, value_serializer="raw", key_serializer="raw")
    decisions = app.topic(settings.decisions_topic, value_serializer="raw", key_serializer="raw")
    audit = app.topic(settings.audit_topic, value_serializer="raw", key_serializer="raw")
    dead = app.topic(settings.dead_letter_topic, value_serializer="raw", key_serializer="raw")
    processor = Processor(
        Engine(
            EngineConfig(
                settings.step_drift_warmup,
                settings.step_drift_threshold,
                price_per_accel_hour=settings.price_per_accel_hour,
            )
        ),
        Admission(allowed_lateness=settings.allowed_lateness_s),
    )
    ops_service = OpsService(app, settings)

    async def publish(out: Output) -> None:
        for record in out.audit:
            await audit.send(key=record.key.encode(), value=record.encode())
        for dl in out.dead_letters:
            await dead.send(key=dl.source.topic.encode(), value=dl.original, headers=dl.headers())
            for reason, n in dl.counts().items():
                ops.DEAD_LETTERS.labels(reason).inc(n)
        for kind, n in out.samples_by_kind.items():
            ops.SAMPLES.labels(kind).inc(n)
        for record in out.audit:
            if record.type == "finding":
                ops.FINDINGS.labels(record.body["kind"]).inc()

    async def consume(stream: Any, handle: Callable[[bytes, SourcePosition], Output]) -> None:
        async for event in stream.events():
            msg = event.message
            position = SourcePosition(msg.topic, msg.partition, msg.offset)
            value = msg.value if isinstance(msg.value, bytes) else b""
            try:
                out = handle(value, position)
            except Exception as exc:  # a bug must not make Faust ack and silently skip the message
                log.exception("processing failed on a message; dead-lettered", extra=position.as_dict())
                out = Output()
                out.reject(value, position, [Reject("internal_error", repr(exc))])
            await publish(out)
            ops.MESSAGES.labels(msg.topic).inc()
            ops_service.observe(msg.topic, msg.partition, msg.offset)

    @app.agent(telemetry)
    async def on_telemetry(stream: Any) -> None:
        await consume(stream, processor.telemetry)

    @app.agent(decisions)
    async def on_decisions(stream: Any) -> None:
        await consume(stream, processor.decision)

    return app, ops_service


def run(settings: Settings) -> None:
    """Run the worker until SIGTERM/SIGINT; Faust commits what was processed on the way out."""
    (settings.home / "worker" / settings.worker_group).mkdir(parents=True, exist_ok=True)
    app, ops_service = build_app(settings)
    worker = faust.Worker(
        app,
        ops_service,
        loglevel=settings.log_level,
        logging_config=config_dict(settings.log_level, settings.log_format),
        quiet=True,
        redirect_stdouts=False,
    )
    worker.execute_from_commandline()
