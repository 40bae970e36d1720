"""What every simulated scenario offers, and the message helpers all simulators share.

A scenario is built by ``SCENARIOS[name](seed, ranks, steps)``; ``run()`` yields ``(topic kind, key,
value)`` in event-time order (``kind`` is ``telemetry`` or ``decisions``; values are Kafka values under
the event contract) and counts the samples it emitted; ``ground_truth(seed)`` says afterwards what was
injected. Every ground truth has ``scenario``, ``seed``, ``job``, ``steps``, ``t0``, ``causes`` (each with
``element``, ``kind``, ``start_step``, ``end_step``, ``magnitude``, ``decision``), ``expected_findings``,
``step_time_s`` and ``counterfactual_step_time_s``. Event time starts at ``T0``; the wall clock is never
read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import orjson

from streams.contract.schema import DECISION_SCHEMA, TELEMETRY_SCHEMA

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: event time, never the wall clock
Message = tuple[str, str, bytes]  # (telemetry | decisions, key, value)


class Scenario(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def job(self) -> str: ...

    @property
    def steps(self) -> int: ...

    @property
    def samples(self) -> int:
        """Samples the last ``run()`` emitted."""

    def run(self) -> Iterator[Message]: ...

    def ground_truth(self, seed: int) -> dict[str, Any]: ...


def envelope(source: str, seq: int, columns: list[dict[str, Any]]) -> bytes:
    """A telemetry message of columnar batches (numpy arrays are written natively)."""
    doc = {"schema": TELEMETRY_SCHEMA, "source": source, "seq": seq, "columns": columns}
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)


def decision(time: float, **fields: Any) -> bytes:
    """A decision message: ``id``, ``controller``, ``layer``, ``action``, ``targets``, ... at event ``time``."""
    return orjson.dumps({"schema": DECISION_SCHEMA, "time": time, **fields})


def metrics(entity: Any, name: str, value: Any, time: Any, unit: str, job: str) -> dict[str, Any]:
    """A columnar batch of one metric over many entities (``entity``/``value``/``time``: arrays or scalars)."""
    n = max(len(v) if isinstance(v, list) else getattr(v, "size", 1) for v in (entity, value, time))
    return {"kind": "metric", "n": n, "data": {"entity": entity, "name": name, "value": value, "time": time,
                                                "unit": unit, "job": job}}  # fmt: skip


def metric_rows(rows: list[tuple[str, str, float, str]], time: float, job: str) -> dict[str, Any]:
    """A columnar batch of mixed metrics at one ``time``: rows of (entity, name, value, unit)."""
    entity, name, value, unit = (list(col) for col in zip(*rows, strict=True))
    return {"kind": "metric", "n": len(rows), "data": {"entity": entity, "name": name, "value": value,
                                                        "unit": unit, "time": time, "job": job}}  # fmt: skip


def window_summary(job: str, window: int, start: float, duration: float, fresh: float, offered: float, good: float,
                   failed: float, accelerators: int) -> dict[str, Any]:  # fmt: skip
    """A serving window as one ``step`` sample: ``output_units`` = requests answered in time (goodput),
    ``attempts`` = offered attempts per fresh request (rounded, at least 1), ``status`` = ``ok`` (failed
    attempts ≤ 1% of those offered), ``timeout`` (goodput under half the fresh requests) or ``retried``."""
    status = "ok" if failed <= 0.01 * offered else "timeout" if good < 0.5 * fresh else "retried"
    return {"kind": "step", "n": 1, "data": {
        "job": job, "step": window, "start": start, "duration": duration, "output_units": good,
        "attempts": max(1, round(offered / fresh)), "status": status, "accelerators": accelerators}}  # fmt: skip


def cause(element: str, kind: str, start_step: int, end_step: int, magnitude: float, decision: str | None = None,
          **detail: Any) -> dict[str, Any]:  # fmt: skip
    """One injected cause as the ground truth records it (``detail``: what else a detector may be scored on)."""
    return {"element": element, "kind": kind, "start_step": start_step, "end_step": end_step,
            "magnitude": magnitude, "decision": decision, **detail}  # fmt: skip
