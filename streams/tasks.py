"""The worker's tasks: one :class:`WorkerState` per telemetry partition it is assigned, created (its
snapshot loaded, fencing the previous owner) when Kafka assigns the partition and committed when the
partition is revoked, so that state moves with its partition (Kafka Streams' task model)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.config import Settings
from streams.durable import Transactions
from streams.pipeline import build_processor
from streams.worker_state import Highwater, TransactionFailed, WorkerState

log = logging.getLogger("driftlog.worker")
STOPPING_COMMIT_S = 3.0  # on SIGTERM, a revoked task's last commit gives up after this long


@dataclass
class Tasks:
    settings: Settings
    highwater: Highwater
    tasks: dict[int, WorkerState] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: bool = False  # SIGTERM: a revoked task's last commit may take only STOPPING_COMMIT_S

    def new(self, partition: int) -> WorkerState:
        s = self.settings
        transactions = Transactions(s.kafka_bootstrap_servers, f"{s.worker_group}/p{partition}", s.state_topic,
                                    s.audit_topic, s.dead_letter_topic, shared_topic=s.shared_topic,
                                    partition=partition)  # fmt: skip
        return WorkerState(partition, build_processor(s), transactions, self.highwater, s.idle_flush_s,
                           s.metrics_encoding)  # fmt: skip

    async def revoked(self, partitions: Iterable[int]) -> None:
        """Commit what the revoked tasks hold (the next owner loads it); they stop when the new assignment
        says whether they stay."""
        for p in sorted(set(partitions) & set(self.tasks)):
            try:
                commit = self.tasks[p].commit(force=True)
                await (asyncio.wait_for(commit, STOPPING_COMMIT_S) if self.stopping else commit)
            except (TransactionFailed, TimeoutError) as exc:  # the next owner resumes from the last snapshot
                log.warning("could not commit a revoked task", extra={"partition": p, "error": repr(exc)})

    async def assigned(self, partitions: Iterable[int]) -> None:
        wanted = set(partitions)
        for p in sorted(set(self.tasks) - wanted):
            task = self.tasks.pop(p)
            await task.stop()
            log.info("task moved away", extra={"partition": p})
        s = self.settings
        inputs = {s.telemetry_topic: "telemetry", s.decisions_topic: "decisions", s.shared_topic: "shared"}
        if s.metrics_topic:
            inputs[s.metrics_topic] = "metrics"
        for p in sorted(wanted - set(self.tasks)):
            task = self.tasks[p] = self.new(p)
            await task.start(s.kafka_bootstrap_servers, s.state_topic, inputs)
            log.info("task ready", extra={"partition": p, "snapshot": task.seq})
        self.changed.set()

    async def of(self, partition: int) -> WorkerState:
        """The task of a partition, once it is ready (a message can arrive before its assignment is done)."""
        while (task := self.tasks.get(partition)) is None:
            self.changed.clear()
            await self.changed.wait()
        await task.ready.wait()
        return task

    def each(self) -> list[WorkerState]:
        return [self.tasks[p] for p in sorted(self.tasks)]

    async def stop(self) -> None:
        for task in self.each():
            await task.stop()


Handler = Callable[..., Awaitable[None]]


def on_rebalance(tasks: Tasks, telemetry_topic: str) -> tuple[Handler, Handler]:
    """Handlers for Faust's ``on_partitions_revoked`` / ``on_partitions_assigned`` signals."""

    async def revoked(sender: Any, revoked: Iterable[Any], **_: Any) -> None:
        await tasks.revoked(tp.partition for tp in revoked if tp.topic == telemetry_topic)

    async def assigned(sender: Any, assigned: Iterable[Any], **_: Any) -> None:
        await tasks.assigned(tp.partition for tp in assigned if tp.topic == telemetry_topic)

    return revoked, assigned
