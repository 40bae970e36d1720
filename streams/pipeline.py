"""The adapter between Kafka messages and the pure engine, free of Faust so that tests, replay and the
live agents share it: raw bytes + source position in, audit records and dead letters out."""

from __future__ import annotations

import copy
import hashlib
import pickle
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from audit.records import AuditRecord, SourcePosition
from streams.config import Settings
from streams.contract.admission import Admission
from streams.contract.decision import decode_decision
from streams.contract.envelope import Decoded, Reject, SampleBatch, decode_telemetry
from streams.engine import elements
from streams.engine.engine import Engine, EngineConfig, EngineOutput, unpickled
from streams.engine.timeline import Chunk, Origin, Timeline
from streams.shared import Mark, forwarded, jobless

MAX_LISTED = 1000  # sample positions listed per dead-letter reason (the count is always exact)
MAX_REFUSED = 4096  # admission verdicts kept before those of released messages are forgotten


def _rid(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class DeadLetter:
    """A message with rejected content: the original bytes go to the dead-letter topic once, with headers
    naming the reasons; the audit trail gets one record per reason (count and sample positions)."""

    original: bytes
    source: SourcePosition
    rejects: tuple[Reject, ...]

    def counts(self) -> Counter[str]:
        return Counter(r.reason for r in self.rejects)

    def headers(self) -> list[tuple[str, bytes]]:
        first = self.rejects[0]
        listed = [{"index": r.index, "reason": r.reason, "detail": r.detail} for r in self.rejects[:20]]
        return [
            ("driftlog.reason", first.reason.encode()),
            ("driftlog.detail", first.detail.encode()[:1024]),
            ("driftlog.reasons", orjson.dumps(dict(sorted(self.counts().items())))),
            ("driftlog.source", f"{self.source.topic}/{self.source.partition}/{self.source.offset}".encode()),
            ("driftlog.rejects", orjson.dumps(listed)[:16_384]),
        ]

    def audit_records(self) -> list[AuditRecord]:
        digest = hashlib.sha256(self.original).hexdigest()
        by_reason: dict[str, list[Reject]] = {}
        for r in self.rejects:
            by_reason.setdefault(r.reason, []).append(r)
        records = []
        for reason, rejects in sorted(by_reason.items()):
            body = {
                "reason": reason,
                "detail": rejects[0].detail,
                "count": len(rejects),
                "indices": [r.index for r in rejects[:MAX_LISTED] if r.index is not None],
                "whole_message": rejects[0].index is None,
                "original_sha256": digest,
                "original_bytes": len(self.original),
            }
            rid = _rid("dl", digest, reason)  # what was refused and why; where it was read is provenance
            records.append(AuditRecord("dead_letter", rid, self.source, body, key=self.source.topic))
        return records


@dataclass
class Output:
    audit: list[AuditRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    samples_by_kind: Counter[str] = field(default_factory=Counter)
    forward: list[bytes] = field(default_factory=list)  # job-less samples for the other tasks (streams.shared)

    def reject(self, raw: bytes | Callable[[], bytes], source: SourcePosition, rejects: list[Reject]) -> None:
        if rejects:
            dead = DeadLetter(raw if isinstance(raw, bytes) else raw(), source, tuple(rejects))
            self.dead_letters.append(dead)
            self.audit.extend(dead.audit_records())

    def extend(self, other: Output) -> None:
        self.audit.extend(other.audit)
        self.dead_letters.extend(other.dead_letters)
        counts = self.samples_by_kind
        for kind, n in other.samples_by_kind.items():  # (Counter.update's sum, without its Mapping check)
            counts[kind] += n
        self.forward.extend(other.forward)


@dataclass
class Processor:
    """Turns telemetry and decision messages into audit records, deterministically: messages are admitted
    (duplicates and late samples of their source refused), merged by event time (:mod:`timeline`), and the
    epochs the watermark has passed go through the engine. Records depend on the input's content, not on how
    it was batched into messages nor on how the topics interleaved. ``channel`` names the input a message
    came from (a topic partition, a file); channels declared up front hold the watermark back until they
    deliver, so that one read later (e.g. the decisions topic) never sees its data declared late."""

    engine: Engine = field(default_factory=Engine)
    admission: Admission = field(default_factory=Admission)
    epoch_s: float = 1.0
    decision_share: tuple[int, int] = (0, 1)  # (index, count): the decision partitions whose records it writes
    forwards: bool = False  # a live worker's task: job-less samples it admits also go to Output.forward
    marks: dict[str, bool] = field(default_factory=dict)  # shared channel -> its newest mark said caught up
    timeline: Timeline = field(init=False)
    # (channel, offset) -> what admission refused of a message that may still be buffered: the message's
    # sample indices, or None for the whole message (a duplicate); re-reading it after a restore keeps that
    refused: dict[Origin, tuple[int, ...] | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.timeline = Timeline(lateness=self.admission.allowed_lateness, epoch_s=self.epoch_s)

    def declare(self, sources: Iterable[SourcePosition]) -> None:
        """The inputs (topic partitions, files) to wait for; ``offset`` is ignored."""
        self.timeline.declare(channel(s) for s in sources)

    def telemetry(
        self,
        raw: bytes | Callable[[], bytes],
        source: SourcePosition,
        caught_up: Iterable[str] = (),
        now: float | None = None,
        decoded: Decoded | None = None,
    ) -> Output:
        """A telemetry message; ``now``: its reference time (the Kafka record's timestamp, s), against which
        samples too far in the future are refused (reason ``future``) without moving their source's time.
        ``decoded``: the message already decoded (``analyze`` from Parquet columns); then ``raw`` may be a
        callable that makes the message's bytes, called only if a dead letter needs them."""
        out = Output()
        if decoded is None:
            assert isinstance(raw, bytes)
            decoded = decode_telemetry(raw)
        rejects = list(decoded.rejects)
        if decoded.total:
            why = self.admission.duplicate_message(decoded.source, decoded.seq)
            if why is not None:
                self._refuse(source, None)
                out.reject(raw, source, [Reject("duplicate", why)])
                return out
            kept, refused_at = [], []
            screened = self.admission.refused(decoded.source, decoded.batches, now)
            for batch, masks in zip(decoded.batches, screened, strict=True):
                if masks is None:  # the usual batch: nothing refused
                    kept.append(batch)
                    continue
                late, future = masks
                refused = late | future
                if late.any():
                    detail = f"{batch.kind} sample older than the allowed lateness behind its source's newest"
                    rejects.extend(Reject("late", detail, int(i)) for i in batch.index[late])
                if future.any():
                    detail = f"{batch.kind} sample more than {self.admission.max_future:g} s after its message's time"
                    rejects.extend(Reject("future", detail, int(i)) for i in batch.index[future])
                kept.append(batch.select(~refused) if refused.any() else batch)
                refused_at.extend(batch.index[refused].tolist())
            if refused_at:
                self._refuse(source, tuple(refused_at))
            admitted = self._buffer(kept, source, out, rejects)
            if self.forwards and (shared := jobless(admitted)):
                out.forward.append(forwarded(shared, source))
        out.reject(raw, source, sorted(rejects, key=lambda r: r.index or 0))
        self._release(out, caught_up)
        return out

    def _buffer(self, batches: list[SampleBatch], source: SourcePosition, out: Output,
                rejects: list[Reject]) -> list[SampleBatch]:  # fmt: skip
        """Into the timeline; samples older than the watermark are added to ``rejects``. Returns what was kept."""
        behind = self.timeline.buffer_samples(channel(source), batches, source.offset)
        kept = []
        for batch, late in zip(batches, behind, strict=True):
            on_time = batch
            if late is not None and late.any():
                detail = f"{batch.kind} sample older than the watermark (already analysed)"
                rejects.extend(Reject("late", detail, int(i)) for i in batch.index[late])
                on_time = batch.select(~late)
            out.samples_by_kind[batch.kind] += len(on_time)
            kept.append(on_time)
        return kept

    def shared(self, raw: bytes, source: SourcePosition, caught_up: Iterable[str] = ()) -> Output:
        """A message of the shared topic (:mod:`streams.shared`), forwarded by another task: job-less samples
        that task admitted (buffered as they are; only those older than the watermark are refused, ``late``),
        or a mark of how far that task's input has come."""
        out = Output()
        out.reject(raw, source, self._shared(raw, source))
        self._release(out, caught_up)
        return out

    def _shared(self, raw: bytes, source: SourcePosition) -> list[Reject]:
        """Buffer a shared message's samples or take note of its mark; the samples refused as late."""
        mark, rejects = Mark.decode(raw), list[Reject]()
        if mark is not None:
            self.timeline.heard(channel(source), mark.time)
            self.marks[channel(source)] = mark.caught_up
        else:  # (counted as samples by the task that read them first)
            self._buffer(decode_telemetry(raw).batches, source, Output(), rejects)
        return rejects

    def otlp(self, raw: bytes, source: SourcePosition, encoding: str = "auto", caught_up: Iterable[str] = ()) -> Output:
        """An OpenTelemetry Collector's metrics message (otlp_json or otlp_proto): its data points as
        ``metric`` samples (:mod:`streams.formats.otlp`); bytes that are no OTLP metrics are dead-lettered."""
        from streams.formats.errors import FormatError
        from streams.formats.otlp import envelopes

        try:
            converted = envelopes(raw, encoding, source=f"otlp:{channel(source)}")  # type: ignore[arg-type]
        except FormatError as exc:
            out = Output()
            out.reject(raw, source, [Reject("malformed_json" if raw[:1] in b"{[" else "unknown_schema", str(exc))])
            return out
        out = Output()
        for envelope in converted:
            out.extend(self.telemetry(envelope, source, caught_up))
        return out

    def decision(self, raw: bytes, source: SourcePosition, caught_up: Iterable[str] = ()) -> Output:
        """A decision message. Every engine (every worker task) reads every decision; the decision's own
        record (or its dead letter) is written by one of them only (:meth:`records_decisions_of`)."""
        out = Output()
        decision, reject = decode_decision(raw)
        if decision is not None and self.admission.duplicate_decision(decision["id"]):
            reject = Reject("duplicate", f"decision {decision['id']!r} was already recorded")
            decision = None
            self._refuse(source, None)
        if decision is not None and not self.timeline.add_decision(channel(source), decision, source.offset):
            reject = Reject("late", "decision older than the watermark (the steps it could affect were analysed)")
            decision = None
        recorded = self.records_decisions_of(source)
        if decision is None:
            if recorded:
                out.reject(raw, source, [reject] if reject is not None else [])
            return out
        if recorded:
            out.samples_by_kind["decision"] += 1
            out.audit.append(_decision_record(decision, source))
        self._release(out, caught_up)
        return out

    def snapshot(self) -> Resumable:
        """The state to resume from, without the event-time buffer: the engine's and admission's state, the
        timeline's channel times and frontier, and per channel the offset to re-read from (:meth:`rebuffer`
        every message from there up to what was processed, then carry on)."""
        pending = self.timeline.pending()
        light = copy.copy(self)
        light.timeline = self.timeline.without_buffer()
        self.refused = self._still_pending(pending)  # what no re-read will ask about is forgotten
        light.refused = dict(self.refused)
        return Resumable(pickle.dumps(light, protocol=pickle.HIGHEST_PROTOCOL), pending)

    @staticmethod
    def resume(state: bytes) -> Processor:
        """A processor from :meth:`snapshot`'s state, its buffer empty until the pending range is re-read."""
        return unpickled(state, Processor, "a processor snapshot")

    def rebuffer(self, raw: bytes, source: SourcePosition, kind: str = "telemetry", encoding: str = "auto") -> None:
        """A message re-read after :meth:`resume` (``kind``: of its topic, as the worker names them — telemetry,
        decisions, metrics or shared): what of it is not yet released goes back into the buffer, with the
        admission verdicts it had then. Emits nothing: its records, dead letters and forwarded samples were
        written the first time."""
        at = (channel(source), source.offset)
        verdict = self.refused.get(at, ())
        if verdict is None:
            return
        if kind == "decisions":
            found, _ = decode_decision(raw)
            if found is not None:
                self.timeline.add_decision(at[0], found, source.offset)
            return
        if kind == "shared":
            self._shared(raw, source)
            return
        if kind == "metrics":
            from streams.formats.otlp import envelopes

            messages = envelopes(raw, encoding, source=f"otlp:{channel(source)}")  # type: ignore[arg-type]
        else:
            messages = [raw]
        for message in messages:
            batches = decode_telemetry(message).batches
            kept = [b.select(~np.isin(b.index, verdict)) for b in batches] if verdict else batches
            self.timeline.add_samples(at[0], kept, source.offset)

    def _refuse(self, source: SourcePosition, verdict: tuple[int, ...] | None) -> None:
        self.refused[(channel(source), source.offset)] = verdict
        if len(self.refused) > MAX_REFUSED:  # bounded without snapshots too (analyze, replay)
            self.refused = self._still_pending(self.timeline.pending())

    def _still_pending(self, pending: dict[str, int]) -> dict[Origin, tuple[int, ...] | None]:
        """The admission verdicts of messages a re-read from ``pending`` would see again."""
        return {at: v for at, v in self.refused.items() if at[1] >= pending.get(at[0], at[1] + 1)}

    def records_decisions_of(self, source: SourcePosition) -> bool:
        """Whether this processor writes the records of decisions read from ``source``: ``source.partition``
        must fall in its ``decision_share`` (index, count). (Every processor reads every decision; a share
        decides which one writes each decision's record, apart from who owns the control plane.)"""
        index, count = self.decision_share
        return source.partition % count == index

    def advance(self, caught_up: Iterable[str]) -> Output:
        """Release what the watermark allows now that ``caught_up`` channels have nothing more to read."""
        out = Output()
        self._release(out, caught_up)
        return out

    def flush(self, source: SourcePosition) -> Output:
        """The end of the input (a file, a replayed range): release every epoch, close every job.
        ``source`` is the provenance of what the jobs' ends emit when no epoch was released."""
        out = self.drain()
        _records(self.engine.close(), self._origin() or source, out)
        return out

    def drain(self) -> Output:
        """Release every buffered epoch through the engine (the first half of :meth:`flush`; the jobs stay
        open)."""
        out = Output()
        for end, chunks in self.timeline.drain():
            self._epoch(end, chunks, out)
        return out

    def _release(self, out: Output, caught_up: Iterable[str]) -> None:
        for end, chunks in self.timeline.release(caught_up):
            self._epoch(end, chunks, out)

    def _epoch(self, end: float, chunks: list[Chunk], out: Output) -> None:
        """One released epoch through the engine. Provenance of its records: the message that contributed
        to the epoch last in (channel, offset) order — fixed by the input, whatever the arrival order."""
        source = self._origin()
        assert source is not None
        for chunk in chunks:
            _records(self.engine.process(chunk), source, out)
        _records(self.engine.advance(end), source, out)

    def _origin(self) -> SourcePosition | None:
        name, offset = self.timeline.origin
        if offset < 0:
            return None
        return SourcePosition(*parse_channel(name), offset)


@dataclass(frozen=True)
class Resumable:
    """A processor's snapshot (:meth:`Processor.snapshot`): its state, and per channel the offset from which
    the driver re-reads (:meth:`Processor.rebuffer`) up to the offsets the snapshot covers."""

    state: bytes
    pending: dict[str, int]


def build_processor(settings: Settings, **engine: Any) -> Processor:
    """The processor the settings describe (the worker, replay and analyze all build it here)."""
    return Processor(Engine(engine_config(settings), **engine), admission_of(settings), epoch_s=settings.epoch_s)


def engine_config(settings: Settings) -> EngineConfig:
    """The engine's settings (the worker, replay, analyze and eval read them here)."""
    return EngineConfig(
        step_drift_warmup=settings.step_drift_warmup,
        step_drift_threshold=settings.step_drift_threshold,
        series_every=settings.series_every,
        structural_slowdown_threshold=settings.structural_slowdown_threshold,
        price_per_accel_hour=settings.price_per_accel_hour,
        job_idle_s=settings.job_idle_s,
        rollup_window_s=settings.rollup_window_s,
    )


def admission_of(settings: Settings) -> Admission:
    return Admission(allowed_lateness=settings.allowed_lateness_s, max_future=settings.max_future_s)


def channel(source: SourcePosition) -> str:
    """The input channel of the timeline a message was read from: ``<topic>/<partition>`` (a file: its
    path and partition 0)."""
    return channel_of(source.topic, source.partition)


def channel_of(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def parse_channel(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("/")
    return topic, int(partition)


def _records(result: EngineOutput, source: SourcePosition, out: Output) -> None:
    """The engine's output as audit records, in a fixed order (findings first: attributions refer to them)."""
    for finding in result.findings:
        subject = finding.subjects[0] if finding.subjects else finding.kind
        out.audit.append(AuditRecord("finding", finding.id, source, finding.as_dict(), key=subject))
    for a in result.attributions:
        out.audit.append(AuditRecord("attribution", a.id, source, a.as_dict(), key=a.finding_id))
    for rollup in result.rollups:
        out.audit.append(AuditRecord("metrics_rollup", rollup.id, source, rollup.as_dict(), key=rollup.entity))
    for snap in result.snapshots:
        out.audit.append(AuditRecord("graph_snapshot", snap.id, source, snap.as_dict(), key=elements.job(snap.job)))


def _decision_record(decision: dict[str, Any], source: SourcePosition) -> AuditRecord:
    key = decision["job"] or decision["controller"]
    return AuditRecord("decision", _rid("decision", decision["id"]), source, decision, key=key)
