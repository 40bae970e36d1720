"""The same input, presented differently: what the determinism test (and ``bench/same_records.py``) feeds the
engine to show that its records depend on the input's content only.

Each function takes ``(topic kind, value)`` pairs in event order and returns them reordered or re-batched:
decisions first or last (the two topics read one after the other), telemetry re-batched per rank (as a
per-process exporter sends it), several inputs merged by event time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import orjson

from streams.contract.schema import EVENT_TIME

Item = tuple[str, bytes]


def decisions_first(items: list[Item]) -> list[Item]:
    return [i for i in items if i[0] == "decisions"] + [i for i in items if i[0] != "decisions"]


def decisions_last(items: list[Item]) -> list[Item]:
    return [i for i in items if i[0] != "decisions"] + [i for i in items if i[0] == "decisions"]


def message_time(item: Item) -> float:
    """The oldest event time in a message (a decision's time)."""
    doc = orjson.loads(item[1])
    if item[0] == "decisions":
        return float(doc["time"])
    times = [float(s[EVENT_TIME[s["kind"]]]) for s in doc.get("samples", [])]
    for batch in doc.get("columns", []):
        value = batch["data"][EVENT_TIME[batch["kind"]]]
        times.extend(value if isinstance(value, list) else [value])
    return min(times, default=float("inf"))


def merged(*inputs: list[Item]) -> list[Item]:
    """Several inputs as one stream, ordered by each message's oldest event time (stable)."""
    everything = [item for items in inputs for item in items]
    order = sorted(range(len(everything)), key=lambda i: (message_time(everything[i]), i))
    return [everything[i] for i in order]


def per_rank(items: Iterable[Item]) -> list[Item]:
    """Every telemetry message split into one message per rank (samples without a rank stay together), each
    rank its own source, as per-process exporters send them."""
    out: list[Item] = []
    for kind, raw in items:
        if kind != "telemetry":
            out.append((kind, raw))
            continue
        doc = orjson.loads(raw)
        parts: dict[int, list[dict[str, Any]]] = {}
        for batch in doc.get("columns", []):
            n = int(batch["n"])
            data = {k: v if isinstance(v, list) else [v] * n for k, v in batch["data"].items()}
            ranks = np.asarray(data["rank"]) if "rank" in data else np.full(n, -1)
            for r in np.unique(ranks).tolist():
                rows = np.flatnonzero(ranks == r).tolist()
                cols = {k: [v[i] for i in rows] for k, v in data.items()}
                parts.setdefault(int(r), []).append({"kind": batch["kind"], "n": len(rows), "data": cols})
        rows_wise = doc.get("samples", [])
        for r in sorted(parts):
            env = {**doc, "source": f"{doc['source']}#rank{r}", "columns": parts[r], "samples": []}
            out.append((kind, orjson.dumps(env)))
        if rows_wise:
            out.append((kind, orjson.dumps({**doc, "source": f"{doc['source']}#rows", "columns": []})))
    return out


def without_job(items: Iterable[Item]) -> list[Item]:
    """Telemetry as an exporter that knows no job sends part of it: every ``power_w`` sample and every
    topology relation between elements of no job (device → node, node → switch) moved, with ``job`` empty,
    into a message of its own (source ``infra:<source>``) right after the message it came from."""
    from streams.contract.envelope import decode_telemetry
    from streams.shared import envelope

    out: list[Item] = []
    for kind, raw in items:
        if kind != "telemetry":
            out.append((kind, raw))
            continue
        decoded = decode_telemetry(raw)
        own, infra = [], []
        for batch in decoded.batches:
            moved = _infrastructure(batch.kind, batch.columns)
            if moved.any():
                rest = batch.select(~moved)
                shared = batch.select(moved)
                shared.columns["job"] = np.full(len(shared), "", dtype=object)
                infra.append(shared)
                own.extend([rest] if len(rest) else [])
            else:
                own.append(batch)
        if not infra:
            out.append((kind, raw))
            continue
        seq = decoded.seq or 0
        out.extend([(kind, envelope(own, decoded.source, seq))] if own else [])
        out.append((kind, envelope(infra, f"infra:{decoded.source}", seq)))
    return out


def _infrastructure(kind: str, columns: dict[str, Any]) -> Any:
    """Which rows of a batch an infrastructure exporter would send (no job named)."""
    jobs = columns.get("job")
    if jobs is None:
        return np.zeros(0, bool)
    if kind == "metric":
        return np.asarray(columns["name"] == "power_w", bool)
    if kind == "topology":
        named = [f":{j}/" in s or f":{j}/" in d for j, s, d in zip(jobs, columns["src"], columns["dst"], strict=True)]
        return ~np.asarray(named, bool)
    return np.zeros(len(jobs), bool)
