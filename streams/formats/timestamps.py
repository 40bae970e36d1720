"""Op span timestamps as real exporters write them, to test that the engine holds on them: float32 seconds
relative to an origin (so their resolution is float32's at the origin's distance: ~4 µs at tens of
seconds), with uniform jitter on every start and end, spans in no particular order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.contract.envelope import decode_telemetry

Columns = dict[str, npt.NDArray[Any]]


def op_steps(telemetry: Iterable[bytes]) -> list[Columns]:
    """The op span columns of each step (in step order) in telemetry messages."""
    parts: dict[int, list[Columns]] = {}
    for value in telemetry:
        for b in decode_telemetry(value).batches:
            if b.kind == "op":
                for s in np.unique(b.columns["step"]).tolist():
                    rows = b.columns["step"] == s
                    parts.setdefault(s, []).append({k: v[rows] for k, v in b.columns.items()})
    return [{k: np.concatenate([p[k] for p in parts[s]]) for k in parts[s][0]} for s in sorted(parts)]


def as_exported(
    c: Mapping[str, npt.NDArray[Any]], jitter_s: float, origin_s: float, rng: np.random.Generator
) -> Columns:
    """One step's op span columns as an exporter writes them: times float32 relative to ``origin_s`` seconds
    before the step's first start, each start and end moved by uniform ±``jitter_s``, rows shuffled."""
    start = np.asarray(c["start"], np.float64)
    origin = float(start.min()) - origin_s
    n = len(start)
    rel_start = (start - origin + rng.uniform(-jitter_s, jitter_s, n)).astype(np.float32).astype(np.float64)
    rel_end = (start + c["duration"] - origin + rng.uniform(-jitter_s, jitter_s, n)).astype(np.float32)
    out = dict(c)
    out["start"] = origin + np.maximum(rel_start, 0.0)
    out["duration"] = np.maximum(rel_end.astype(np.float64) - rel_start, 0.0)
    order = rng.permutation(n)
    return {k: np.asarray(v)[order] for k, v in out.items()}
