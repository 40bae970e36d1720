"""Faust's consumer, delivering the records of one fetch as one event per partition.

Faust hands its agents one event per message: per message its fetcher awaits the conductor's callback (flow
control, the producer's buffer, decoding, a channel put), then the agent's stream wakes up (one event-loop turn
per event). For the worker's small-count, large messages that machinery cost about as much CPU as a bare
aiokafka consumer reading the same input. :meth:`BatchingConsumer._drain_messages` (Faust's own, grouped) keeps
Faust's per-message offset bookkeeping (read offsets, gaps of ``read_committed`` input) and its flow control,
but calls the conductor once per partition of a fetch with a :class:`Batch`: a message whose ``messages`` are
that partition's records in offset order. The agent acknowledges the batch as one event, once the transaction
covering its last message is committed; acknowledging it acknowledges each of its messages to the consumer, so
the committed input offsets are Faust's as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from faust.transport.consumer import CONSUMER_FETCHING
from faust.types import TP, ConsumerMessage
from faust.types.tuples import ack_lock


class Batch(ConsumerMessage):
    """A partition's records of one fetch, as one message (its offset is the last record's)."""

    __slots__ = ("messages",)

    def __init__(self, tp: TP, messages: Sequence[ConsumerMessage]) -> None:
        last = messages[-1]
        super().__init__(tp.topic, tp.partition, last.offset, last.timestamp, last.timestamp_type, None, None,
                         b"", None, 0, 0, tp, generation_id=last.generation_id)  # fmt: skip
        self.messages = messages

    def on_final_ack(self, consumer: Any) -> bool:
        """The batch's last reference is gone: acknowledge each of its messages (Faust's committed offsets
        advance over them), and the batch itself, which the stream tracks as unacknowledged."""
        with ack_lock:
            self.acked = True
            consumer._unacked_messages.discard(self)
            for message in self.messages:
                consumer.ack(message)
        return True


def forget(consumer: Any, batch: Batch) -> None:
    """Faust waits (``wait_empty``: at a rebalance, at a stop) until every event it delivered is acknowledged:
    a batch that will not be (its task stopped) is taken out of those it waits for, its messages left
    unacknowledged, so that Faust's committed offsets do not pass them."""
    consumer._unacked_messages.discard(batch)


class BatchingConsumer:
    """Mixin for Faust's consumer (before it in the bases): :meth:`_drain_messages` delivers :class:`Batch`es."""

    async def _drain_messages(self, fetcher: Any) -> None:
        # Faust's loop (faust/transport/consumer.py, 0.15.3: tests/unit/test_batching.py compares them) with
        # the callback once per partition of a fetch
        this: Any = self
        callback = this.callback
        consumer_should_stop = this._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        read_offset = this._read_offset
        acks_enabled_for = this.app.topics.acks_enabled_for
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                this.diag.set_flag(CONSUMER_FETCHING)
                fetched = this.getmany(timeout=1.0)
                await this.sleep(0)
                if this.should_stop:
                    continue
                batches: dict[TP, list[ConsumerMessage]] = {}
                async for tp, message in fetched:
                    last = batches[tp][-1].offset if tp in batches else read_offset[tp]
                    if last is not None and message.offset < last:
                        continue  # (Faust drops it too: read before, re-fetched after a seek)
                    if last and message.offset - last > 1 and acks_enabled_for(message.topic):
                        await this._add_gap(tp, last + 1, message.offset)
                    batches.setdefault(tp, []).append(message)
                for tp, messages in batches.items():
                    # as Faust's getmany per message: nothing more of the fetch once the flow is stopped or the
                    # generation (getmany's, which each message carries) is not the group's: a rebalance seeks
                    # its partitions back to the committed offsets, and sets their read offsets, which
                    # batches not delivered must not move
                    if not this.flow_active or this.app.consumer_generation_id != messages[0].generation_id:
                        break
                    if this._commit_every is not None and this._n_acked >= this._commit_every:
                        this._n_acked = 0
                        await this.commit()
                    await this.wait_first(callback(Batch(tp, messages)), this.suspend_flow.wait())
                    read_offset[tp] = messages[-1].offset
                this.diag.unset_flag(CONSUMER_FETCHING)
        except this.consumer_stopped_errors:
            if this.transport.app.should_stop:
                this.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if this.transport.app.should_stop:
                this.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            this.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            this.diag.unset_flag(CONSUMER_FETCHING)
