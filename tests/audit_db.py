"""An audit DuckDB file built the broker-free way: a simulated scenario through the engine harness
(streams.testing.run_stream), its audit records written through the store's only write path."""

from __future__ import annotations

from pathlib import Path

from audit.api import write_records
from streams.sim.scenarios import SCENARIOS
from streams.testing import run_stream


def build_db(path: Path, scenario: str = "training-fabric", seed: int = 1, ranks: int = 16, steps: int = 200) -> Path:
    sim = SCENARIOS[scenario](seed, ranks, steps)
    out = run_stream((kind, value) for kind, _, value in sim.run())
    write_records(out.audit, path)
    return path
