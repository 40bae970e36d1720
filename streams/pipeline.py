"""The adapter between Kafka messages and the pure engine, free of Faust so that tests, replay and the
live agents share it: raw bytes + source position in, audit records and dead letters out."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from audit.records import AuditRecord, SourcePosition
from streams.contract.admission import Admission
from streams.contract.decision import decode_decision
from streams.contract.envelope import Reject, SampleBatch, decode_telemetry
from streams.engine.engine import Engine, EngineOutput

MAX_LISTED = 1000  # sample positions listed per dead-letter reason (the count is always exact)


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
            rid = _rid("dl", self.source.topic, self.source.partition, self.source.offset, reason)
            records.append(AuditRecord("dead_letter", rid, self.source, body, key=self.source.topic))
        return records


@dataclass
class Output:
    audit: list[AuditRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    samples_by_kind: Counter[str] = field(default_factory=Counter)

    def reject(self, raw: bytes, source: SourcePosition, rejects: list[Reject]) -> None:
        if rejects:
            dead = DeadLetter(raw, source, tuple(rejects))
            self.dead_letters.append(dead)
            self.audit.extend(dead.audit_records())

    def extend(self, other: Output) -> None:
        self.audit.extend(other.audit)
        self.dead_letters.extend(other.dead_letters)
        self.samples_by_kind.update(other.samples_by_kind)


@dataclass
class Processor:
    """Turns telemetry and decision messages into audit records, in input order, deterministically."""

    engine: Engine = field(default_factory=Engine)
    admission: Admission = field(default_factory=Admission)

    def telemetry(self, raw: bytes, source: SourcePosition) -> Output:
        out = Output()
        decoded = decode_telemetry(raw)
        rejects = list(decoded.rejects)
        batches: list[SampleBatch] = []
        if decoded.total:
            why = self.admission.duplicate_message(decoded.source, decoded.seq)
            if why is not None:
                out.reject(raw, source, [Reject("duplicate", why)])
                return out
            masks = self.admission.late_mask(decoded.source, decoded.batches)
            for batch, late in zip(decoded.batches, masks, strict=True):
                kept = batch
                if late.any():
                    detail = f"{batch.kind} sample older than the allowed lateness"
                    rejects.extend(Reject("late", detail, int(i)) for i in batch.index[late])
                    kept = SampleBatch(batch.kind, batch.index[~late], {k: v[~late] for k, v in batch.columns.items()})
                batches.append(kept)
                out.samples_by_kind[kept.kind] += len(kept)
        out.reject(raw, source, sorted(rejects, key=lambda r: r.index or 0))
        _records(self.engine.process(batches), source, out)
        return out

    def flush(self, source: SourcePosition) -> Output:
        """Analyse what the engine still holds back (end of a file or replay); ``source``: the last input."""
        out = Output()
        _records(self.engine.flush(), source, out)
        return out

    def decision(self, raw: bytes, source: SourcePosition) -> Output:
        out = Output()
        decision, reject = decode_decision(raw)
        if decision is not None and self.admission.duplicate_decision(decision["id"]):
            reject = Reject("duplicate", f"decision {decision['id']!r} was already recorded")
            decision = None
        if decision is None:
            out.reject(raw, source, [reject] if reject is not None else [])
            return out
        out.samples_by_kind["decision"] += 1
        out.audit.append(_decision_record(decision, source))
        _records(self.engine.decision(decision), source, out)
        return out


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
        out.audit.append(AuditRecord("graph_snapshot", snap.id, source, snap.as_dict(), key=f"job:{snap.job}"))


def _decision_record(decision: dict[str, Any], source: SourcePosition) -> AuditRecord:
    key = decision["job"] or decision["controller"]
    return AuditRecord("decision", _rid("decision", decision["id"]), source, decision, key=key)
