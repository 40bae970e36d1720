"""The adapter between Kafka messages and the pure engine, free of Faust so that tests, replay and the
live agent share it: raw bytes + source position in, audit records and dead letters out."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from audit.records import AuditRecord, SourcePosition
from streams.contract.envelope import Reject, decode_telemetry
from streams.engine.engine import Engine


@dataclass(frozen=True)
class DeadLetter:
    """A rejected message or sample: the original bytes go to the dead-letter topic with these headers."""

    original: bytes
    source: SourcePosition
    reject: Reject

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            ("driftlog.reason", self.reject.reason.encode()),
            ("driftlog.detail", self.reject.detail.encode()[:1024]),
            ("driftlog.source", f"{self.source.topic}/{self.source.partition}/{self.source.offset}".encode()),
            ("driftlog.index", b"" if self.reject.index is None else str(self.reject.index).encode()),
        ]

    def audit_record(self) -> AuditRecord:
        index = "" if self.reject.index is None else str(self.reject.index)
        rid = hashlib.sha256(
            f"dl|{self.source.topic}|{self.source.partition}|{self.source.offset}|{index}".encode()
        ).hexdigest()[:32]
        body = {
            "reason": self.reject.reason,
            "detail": self.reject.detail,
            "index": self.reject.index,
            "original_sha256": hashlib.sha256(self.original).hexdigest(),
            "original_bytes": len(self.original),
        }
        return AuditRecord("dead_letter", rid, self.source, body, key=self.source.topic)


@dataclass
class Output:
    audit: list[AuditRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    samples_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class TelemetryProcessor:
    engine: Engine = field(default_factory=Engine)

    def handle(self, raw: bytes, source: SourcePosition) -> Output:
        out = Output()
        decoded = decode_telemetry(raw)
        for reject in decoded.rejects:
            dead = DeadLetter(raw, source, reject)
            out.dead_letters.append(dead)
            out.audit.append(dead.audit_record())
        for sample in decoded.samples:
            kind = str(getattr(sample, "kind", "?"))
            out.samples_by_kind[kind] = out.samples_by_kind.get(kind, 0) + 1
        for finding in self.engine.process(decoded.samples):
            subject = finding.subjects[0] if finding.subjects else finding.kind
            out.audit.append(AuditRecord("finding", finding.id, source, finding.as_dict(), key=subject))
        return out
