"""The Faust worker: a thin agent that routes each telemetry message to the task of its partition
(:mod:`tasks`, :mod:`worker_state`), which runs the processor.

Delivery: an exactly-once *effect* into the audit and dead-letter topics (:mod:`durable`). The agent consumes
with manual acknowledgement; every ``DRIFTLOG_STATE_INTERVAL_S`` (or ``COMMIT_EVERY_MESSAGES`` messages, or as
soon as a task that keeps up with its input has records, or has caught up after a backlog) each task writes, in
one Kafka transaction of its own producer, the records produced since its last one (and the samples of no job
it forwards to the other tasks, :mod:`streams.shared`) together with a snapshot of its state and the input
offsets it covers; only then are the input messages acknowledged,
so Faust's committed offsets trail the snapshots. A task is committed when Kafka revokes its partition and
loaded (fencing the previous owner) where it is assigned next, after a SIGKILL too: the sink
(``read_committed``) sees every record once, whatever the number of workers. Nothing in the agent may raise
on bad input (Faust would ack and skip the message): the processor turns every input problem into a dead
letter; a failure around it stops the worker before anything past the message is committed (:func:`fail_task`;
a restart resumes from the last snapshot), or, once the message is in the state, is counted and passed over.

Operations: a broker outage is ridden out — a transaction that fails is kept and resolved once the broker
answers (:mod:`worker_state`), ``/health`` says 503 with the reason meanwhile; a fenced producer (another
instance owns the task) stops the worker. Started while the broker is away, the worker waits for it
(:func:`wait_for_broker`). SIGTERM ends it within ``SHUTDOWN_BUDGET_S`` in every state (:class:`BoundedWorker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import threading
import time
from typing import Any

import faust
import numpy.ma  # noqa: F401 - numpy 2 imports it on the first np.unique: ~0.1 s on the first message's path
from faust.types import TP
from mode import Service

from audit.records import SourcePosition
from streams import ops
from streams.config import Settings
from streams.health import Health, probe, until_broker
from streams.kafka import fetching
from streams.kafka.admin import ensure_topics
from streams.kafka.batching import forget
from streams.logs import config_dict
from streams.pipeline import Output
from streams.tasks import Tasks, on_rebalance
from streams.worker_state import TransactionFailed, WorkerState

log = logging.getLogger("driftlog.worker")
COMMIT_EVERY_MESSAGES = 2000  # a transaction at least this often (besides every DRIFTLOG_STATE_INTERVAL_S)
SHUTDOWN_BUDGET_S = 7.5  # SIGTERM → exit, whatever the broker does
OFFSETS_COMMIT_INTERVAL_S = 1.0  # Faust commits the acknowledged input offsets this often
# events an agent's stream buffers (Faust pauses the fetching of its partitions at 80% of it): an event is a
# partition's fetch (streams/kafka/batching.py), up to consumer_max_fetch_size (1 MB) of record batches, not one
# message; compressed batches hold more values: ~6 MB with lz4, ~9 with zstd (a backlog buffers up to ~64 MB of
# uncompressed input, ~400 MB of lz4's). Fewer starve an uncompressed backlog: a 5.8 M-sample drain took 1.4x as
# long with 32 and 2.4x with 16 (one run each, session 20); Faust's 4,096 would let a backlog fill gigabytes
STREAM_BUFFER_FETCHES = 64


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
        self.tasks: Any = None  # the worker's Tasks (one per assigned telemetry partition)
        self.status = Health("worker", settings.health_broker_timeout_s, settings.health_stall_s)

    async def on_start(self) -> None:
        logging.getLogger("faust.app.base").addFilter(_crash_in_one_line)  # (logging is configured by now)
        logging.getLogger("faust.transport.drivers.aiokafka").addFilter(_crash_in_one_line)
        logging.getLogger(fetching.__name__).addFilter(_crash_in_one_line)  # (its consumer logs as its module)
        self.runner, self.port = await ops.start_http(
            self.settings.http_host, self.settings.worker_http_port, self.health
        )
        log.info("worker health/metrics listening", extra={"port": self.port})

    async def on_stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy once the worker has joined its group, is not in the middle of a rebalance and has loaded
        its state; 503 with the reason when the broker has been away too long, output stalls behind lag, or
        a transaction failed (:mod:`streams.health`)."""
        app = self.app
        assigned = _assignment(app)
        joined = app.rebalancing_count > 0 and not app.rebalancing
        tasks = self.tasks.each() if self.tasks is not None else []
        ready = bool(tasks) and all(t.ready.is_set() for t in tasks)
        self.status.ready = joined and ready
        self.status.stopping = bool(app.should_stop)
        self.status.problems = [p for t in tasks for p in t.problems()]
        self.status.details = {
            "assigned": assigned, "rebalancing": app.rebalancing, "state_loaded": ready,
            "snapshots": {t.partition: t.seq for t in tasks},
            "waiting_for": {t.partition: sorted(set(t.channels) - set(t.caught_up())) for t in tasks},
            "input_ended": ready and all(t.flushed and not t.dirty for t in tasks),
        }  # fmt: skip
        return self.status.verdict()

    async def watch_broker(self) -> None:
        """Is the broker there? (what ``/health`` says about it)"""
        unreachable = await probe(self.settings.kafka_bootstrap_servers, 2.0)
        if unreachable is None:
            self.status.broker_ok()
        else:
            self.status.broker_failed(unreachable)

    def highwater(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark; None while it is unknown (no consumer yet, or the partition is not
        assigned to this worker now: ``/health`` may ask in the middle of a rebalance)."""
        consumer = self.app.consumer if self.app.producer is not None else None
        if consumer is None:
            return None
        try:
            return consumer.highwater(_tp(topic, partition))
        except AssertionError:  # aiokafka: "Partition is not assigned"
            return None

    def observe(self, topic: str, partition: int, offset: int, highwater: int | None) -> None:
        """Record progress and refresh the lag gauge (``highwater`` minus the next offset to process)."""
        self.processed[(topic, partition)] = offset
        if highwater is not None:
            labelled(ops.CONSUMER_LAG, topic, partition).set(max(0, highwater - offset - 1))


def _crash_in_one_line(record: logging.LogRecord) -> bool:
    """Faust logs the reason a worker stops (``app.crash``) with its traceback; the worker has said why in one
    line already (a fenced producer, a task taken over): keep Faust's line, drop the traceback; so for the
    consumer thread that Faust then fails to stop because its event loop is closed."""
    message = record.getMessage()
    if "Crashed reason=" in message or ("Error while stopping child" in message and "loop is closed" in message):
        record.exc_info, record.exc_text = None, None
    return True


def _assignment(app: faust.App) -> list[str]:
    """The topic partitions assigned to the worker (none while its consumer has not started)."""
    try:
        consumer = app.consumer if app.producer is not None else None
        return sorted(f"{tp.topic}/{tp.partition}" for tp in consumer.assignment()) if consumer else []
    except Exception:
        return []


def _tp(topic: str, partition: int) -> Any:
    return TP(topic, partition)


@functools.cache
def labelled(metric: Any, *labels: object) -> Any:
    """``metric.labels(*labels)``, looked up once: prometheus_client checks and locks in every call, which adds
    up at a few calls per message (a child, once made, lives as long as its metric)."""
    return metric.labels(*labels)


def publish_metrics(out: Output) -> None:
    for dl in out.dead_letters:
        for reason, n in dl.counts().items():
            labelled(ops.DEAD_LETTERS, reason).inc(n)
    for kind, n in out.samples_by_kind.items():
        labelled(ops.SAMPLES, kind).inc(n)
    for record in out.audit:
        if record.type == "finding":
            labelled(ops.FINDINGS, record.body["kind"]).inc()


def faust_app(settings: Settings) -> faust.App:
    return fetching.App(
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
        broker_commit_interval=OFFSETS_COMMIT_INTERVAL_S,
        stream_buffer_maxsize=STREAM_BUFFER_FETCHES,
        # a restarted worker rejoins once the dead member's session expired: keep that short (the broker's
        # group.min.session.timeout.ms is 6 s by default)
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
    )


async def handle_event(
    state: WorkerState, ops_service: OpsService, stream: Any, event: Any, kind: str, encoding: str
) -> None:
    """One fetch of a partition (a :class:`~streams.kafka.batching.Batch`), message by message; acknowledged
    after the transaction that covers its last message (:meth:`WorkerState.commit`)."""
    messages = event.message.messages
    for n, message in enumerate(messages):
        if n:  # a loop turn per message, as Faust's stream gives: timers, /health, SIGTERM wait no fetch's end
            await asyncio.sleep(0)
        if state.stopped:  # moved away meanwhile: its next owner resumes from the snapshot
            await let_go(state, ops_service, stream, event)
            return
        try:
            await handle_message(state, ops_service, message, (stream, event) if n == len(messages) - 1 else None,
                                 kind, encoding)  # fmt: skip
        except Exception as exc:  # (a bug: the processor dead-letters what it cannot process)
            await fail_task(state, ops_service, stream, event, exc)
            return


async def fail_task(state: WorkerState, ops_service: OpsService, stream: Any, event: Any, exc: Exception) -> None:
    """A message of a fetch could not be handled (not even dead-lettered): going on would commit snapshots past
    it, so its task commits nothing more and the worker stops (a restart resumes from the last snapshot).
    Faust would have skipped the rest of the fetch instead (the agent restarted, with the next one)."""
    state.stopped = True
    ops_service.status.fail(exc)
    log.exception("a message could not be handled; stopping (a restart loses nothing)",
                  extra={"partition": state.partition})  # fmt: skip
    with contextlib.suppress(Exception):  # (what failed may have been acknowledging it)
        await let_go(state, ops_service, stream, event)
    await ops_service.app.crash(exc)


async def let_go(state: WorkerState, ops_service: OpsService, stream: Any, event: Any) -> None:
    """A fetch whose task stopped before its last message: acknowledged if a committed snapshot covers that
    message (all of it then), else left unacknowledged, and Faust told not to wait for it (a rebalance or a
    stop would wait for it in vain)."""
    last = event.message
    if state.durable(last.topic, last.partition, last.offset):
        await stream.ack(event)
    else:
        forget(ops_service.app.consumer, last)


async def handle_message(
    state: WorkerState, ops_service: OpsService, msg: Any, ack: tuple[Any, Any] | None, kind: str, encoding: str
) -> None:
    """One input message: skipped if the restored state covers it, else processed. ``ack``: its batch's last
    message carries the batch, acknowledged with (or after) the transaction covering this message."""
    if state.covered(msg.topic, msg.partition, msg.offset):  # a re-delivery (after a restart or a rebalance)
        if ack is not None and state.durable(msg.topic, msg.partition, msg.offset):
            await ack[0].ack(ack[1])
        elif ack is not None:
            state.acks.append(ack)  # acknowledged with the snapshot that will cover it
        return
    position = SourcePosition(msg.topic, msg.partition, msg.offset)
    value = msg.value if isinstance(msg.value, bytes) else b""
    now = float(msg.timestamp) if msg.timestamp else None  # Faust gives the record timestamp in seconds
    out = state.process(kind, value, position, encoding, now)
    state.pending += 1
    if ack is not None:
        state.acks.append(ack)
    try:
        await after_message(state, ops_service, msg, out, ack is not None)
    except Exception:  # (the message is in the state, its acknowledgement kept: only metrics or a commit's timing)
        state.after_failures += 1
        if state.after_failures == 1:  # (a lasting bug would log a traceback per message: the count says the rest)
            log.exception("after a message was processed; going on", extra=position.as_dict())
        ops.AFTER_FAILURES.inc()


async def after_message(state: WorkerState, ops_service: OpsService, msg: Any, out: Output, last: bool) -> None:
    """A message processed (``last``: of its fetch): its metrics, and a commit if one is due."""
    publish_metrics(out)
    labelled(ops.MESSAGES, msg.topic).inc()
    ops.LAST_MESSAGE.set_to_current_time()
    ops_service.observe(msg.topic, msg.partition, msg.offset, state.highs.get((msg.topic, msg.partition)))
    # records of a task that keeps up go at once (a finding waits for no timer); a backlog is committed every
    # interval (or COMMIT_EVERY_MESSAGES), so that snapshots do not take its time, and at once when it ends
    # (its offsets too: the group's lag is 0 when the input is processed, not up to two timers later); that
    # is asked at a fetch's last message, whose acknowledgement (the fetch's) that commit carries
    caught, state.caught = state.caught, None  # (as the processor was told; None: asked again)
    ended = last and state.backlog_ended(caught)
    due = ended or state.pending >= COMMIT_EVERY_MESSAGES or (out.audit and state.live(caught))
    if not due or state.unresolved is not None:  # (a failed transaction: the timer retries)
        return
    state.early = state.early or ended  # (the timer's next round leaves the task out: WorkerState.timer_due)
    if await commit_task(ops_service.app, ops_service, state) and ended:
        await end_of_backlog(ops_service, state)


async def end_of_backlog(ops_service: OpsService, task: WorkerState) -> None:
    """After a task's commit at the end of a backlog: the input offsets at once; a commit that came too soon
    after the last snapshot (``SNAPSHOT_SHARE``) is made as soon as it is allowed, not on the next timer."""
    if task.stopped:
        return
    if not task.dirty:
        await commit_offsets(ops_service.app)
    elif task.deferred is None:
        task.deferred = asyncio.ensure_future(_commit_when_allowed(ops_service, task))


async def _commit_when_allowed(ops_service: OpsService, task: WorkerState) -> None:
    """(Cancelled when the task stops: :meth:`WorkerState.stop`.)"""
    try:
        await asyncio.sleep(max(0.0, task.allowed_in()))
        if task.stopped or task.unresolved is not None:
            return
        if await commit_task(ops_service.app, ops_service, task) and not task.dirty:
            await commit_offsets(ops_service.app)
    finally:
        task.deferred = None


async def commit_task(app: faust.App, ops_service: OpsService, task: WorkerState) -> bool:
    """One task's transaction (:meth:`WorkerState.commit`). One that failed waits for the broker (logged, on
    ``/health``); anything else (a fenced producer, a bug) stops the worker — nothing unacknowledged is lost,
    a restart resumes from the last committed snapshot. Never raises (an agent that raised would skip its
    message); False when the worker is stopping."""
    try:
        if await task.commit() or not task.dirty:
            ops_service.status.committed()
    except TransactionFailed as exc:  # kept; committed once the broker is back (/health says so)
        log.warning("a transaction of the worker's output failed; retrying",
                    extra={"partition": task.partition, "error": str(exc)})  # fmt: skip
    except Exception as exc:
        ops_service.status.fail(exc)
        log.error("the worker's output cannot be committed; stopping (a restart loses nothing)",
                  extra={"error": repr(exc)})  # fmt: skip
        await app.crash(exc)
        return False
    return True


async def commit_round(app: faust.App, ops_service: OpsService, tasks: list[WorkerState], interval_s: float) -> None:
    """The state timer's round (every ``interval_s``): each task ticks and commits, unless a commit at a
    backlog's end took this round's place (:meth:`WorkerState.timer_due`)."""
    committed, ended = False, False
    began, last = time.monotonic(), max((t.input_at for t in tasks), default=0.0)
    for task in tasks:  # the work since the worker's last input: ticks and commits (of every task, when it came)
        task.worked = [(at, seconds) for at, seconds in task.worked if at >= last]
    worked = sum(seconds for t in tasks for _, seconds in t.worked)
    for task in tasks:
        if not task.ready.is_set():
            continue
        flushed = task.flushed
        out, seq = task.tick(), task.seq
        ended = ended or (task.flushed and not flushed)
        if out is not None:
            publish_metrics(out)
        if task.timer_due(out) and not await commit_task(app, ops_service, task):
            return
        task.early = task.early and task.seq > seq  # (a round that did not commit leaves the next one its place)
        committed = committed or task.seq > seq
    if ended:  # (the round's idle flushes: work; the time before them since the last input, less work: a wait)
        ops.INPUT_END.set(time.time() - (time.monotonic() - began))
        ops.INPUT_END_WAIT.set(max(0.0, began - last - worked) if last else 0.0)  # (no input: no wait to tell)
        ops.INPUT_END_WORK.set(worked)
        ops.INPUT_END_ROUND.set(time.monotonic() - began)
    # at the input's end, the offsets at once rather than on Faust's timer (not more often than Faust does)
    at_end = committed and all(t.own_caught_up() and not t.dirty for t in tasks)
    if at_end and interval_s >= OFFSETS_COMMIT_INTERVAL_S:
        await commit_offsets(app)


async def commit_offsets(app: faust.App) -> None:
    """Commit the acknowledged input offsets now (Faust does every ``broker_commit_interval``); they are
    monitoring only (a restarted task resumes from its snapshot's offsets), so a failure is left to Faust's
    next commit."""
    try:
        await app.consumer.commit()
    except Exception as exc:
        log.info("committing the input offsets failed; Faust's next commit does", extra={"error": repr(exc)})


def build_app(settings: Settings) -> tuple[faust.App, OpsService]:
    """Create the Faust application, register its agents; also return the ops service to run beside it."""
    app = faust_app(settings)
    telemetry = app.topic(settings.telemetry_topic, value_serializer="raw", key_serializer="raw")
    ops_service = OpsService(app, settings)
    tasks = Tasks(settings, ops_service.highwater)
    ops_service.tasks = tasks
    revoked, assigned = on_rebalance(tasks, settings.telemetry_topic)
    app.on_partitions_revoked.connect(revoked)
    app.on_partitions_assigned.connect(assigned)

    async def consume(stream: Any, kind: str) -> None:
        manual = stream.noack()
        async for event in manual.events():
            task = await tasks.of(event.message.partition)
            await handle_event(task, ops_service, manual, event, kind, settings.metrics_encoding)

    @app.agent(telemetry)
    async def on_telemetry(stream: Any) -> None:
        await consume(stream, "telemetry")

    if settings.metrics_topic:  # an OpenTelemetry Collector's metrics (streams/formats/otlp.py), by partition
        metrics = app.topic(settings.metrics_topic, value_serializer="raw", key_serializer="raw")

        @app.agent(metrics)
        async def on_metrics(stream: Any) -> None:
            await consume(stream, "metrics")

    @app.timer(interval=settings.state_interval_s)  # type: ignore[untyped-decorator]
    async def commit() -> None:
        await commit_round(app, ops_service, tasks.each(), settings.state_interval_s)

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def broker() -> None:
        await ops_service.watch_broker()

    return app, ops_service


async def wait_for_broker(settings: Settings) -> bool:
    """Before Faust starts (it gives up at once on a broker that is away): create the topics, waiting for the
    broker while it does not answer, with ``/health`` served (503 "starting: waiting for the broker").
    False when SIGTERM or SIGINT came first."""
    status = Health("worker", settings.health_broker_timeout_s, settings.health_stall_s)
    stopping, loop = asyncio.Event(), asyncio.get_running_loop()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in before:
        loop.add_signal_handler(sig, stopping.set)
    try:
        runner, _ = await ops.start_http(settings.http_host, settings.worker_http_port, status.verdict)
        try:
            cfg = settings
            await until_broker(lambda: ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics,
                                                     cfg.topic_partitions), status, stopping)  # fmt: skip
            status.broker_ok()
        finally:
            await runner.cleanup()
    finally:
        for sig, handler in before.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)
    return not stopping.is_set()


class BoundedWorker(faust.Worker):
    """Faust's worker, with its shutdown bounded: SIGTERM (or SIGINT) ends the process within
    ``SHUTDOWN_BUDGET_S`` whatever the broker does (Faust's own stop can wait a minute and more for a broker
    that is away, or for an agent in the middle of a backlog). What was not committed by then is not lost:
    it was never acknowledged, and a restart resumes from the last committed snapshot."""

    _deadline: threading.Timer | None = None

    def install_signal_handlers(self) -> None:
        """Faust's handlers run in the event loop, which a long step (a snapshot, an engine batch) can hold:
        the deadline is armed at once, by a handler of Python's own (the event loop is still woken, through
        its wakeup file descriptor, and runs Faust's)."""
        super().install_signal_handlers()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._bound_shutdown())
        threading.excepthook = _thread_ended

    def _bound_shutdown(self) -> None:
        if self._deadline is not None:
            return
        for service in self.services:
            if isinstance(service, OpsService) and service.tasks is not None:
                service.tasks.stopping = True
        self._deadline = threading.Timer(SHUTDOWN_BUDGET_S, _give_up)
        self._deadline.daemon = True
        self._deadline.start()


def _thread_ended(args: threading.ExceptHookArgs) -> None:
    """Faust's consumer thread ends with a CancelledError when it is stopped while the broker is away: one
    line, not a traceback (anything else is a bug, logged with its traceback)."""
    if args.exc_type is asyncio.CancelledError:
        log.info("a Faust thread was cancelled while stopping", extra={"thread": getattr(args.thread, "name", "")})
    else:
        log.error("a Faust thread failed", exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # type: ignore[arg-type]


def _give_up() -> None:
    log.warning(f"the worker did not stop within {SHUTDOWN_BUDGET_S:g}s; exiting now "
                "(nothing acknowledged is lost: a restart resumes from the last committed snapshot)")  # fmt: skip
    logging.shutdown()
    os._exit(0)


def run(settings: Settings) -> None:
    """Run the worker until SIGTERM/SIGINT; Faust commits what was processed on the way out."""
    (settings.home / "worker" / settings.worker_group).mkdir(parents=True, exist_ok=True)
    if not asyncio.run(wait_for_broker(settings)):
        return
    app, ops_service = build_app(settings)
    worker = BoundedWorker(
        app,
        ops_service,
        loglevel=settings.log_level,
        logging_config=config_dict(settings.log_level, settings.log_format),
        quiet=True,
        redirect_stdouts=False,
    )
    worker.spinner = None  # it writes terminal control codes, into a log file too
    # what is built by now (modules, the app) lives as long as the worker: the collector need not walk it again
    # in every full collection while a backlog is processed
    gc.freeze()
    worker.execute_from_commandline()
