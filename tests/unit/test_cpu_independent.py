"""The records do not depend on the machine's CPU: the same scenarios give the same record ids and bodies
whichever kernels OpenBLAS picks (it picks by CPU; ``OPENBLAS_CORETYPE`` forces the choice here). A worker's
trail, and a post-mortem ``replay`` or ``analyze`` on another machine, are then the same records."""

import os
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
# (scenario, seed, ranks, steps): those whose records differed between CPUs (their early-warning, seasonal
# and change-point findings), at sizes small enough for three runs each
RUNS = [("inference-sla", 1, 16, 60), ("control-storm", 1, 32, 60), ("training-fabric", 1, 16, 60)]
RUNS += [("serving-saturation", 1, 16, 100)]
CORES = ("", "Prescott", "Sandybridge")  # "": OpenBLAS' own choice for this CPU
PROGRAM = "import orjson, sys; from bench.fingerprint import run_of; "
PROGRAM += "sys.stdout.buffer.write(orjson.dumps([run_of(*run) for run in orjson.loads(sys.argv[1])]))"


def records(core: str) -> list[dict[str, str]]:
    """Record hashes (type and id -> body hash) of every run in ``RUNS``, in a process whose OpenBLAS uses
    ``core``'s kernels."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env |= {"OPENBLAS_CORETYPE": core} if core else {}
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, orjson.dumps(RUNS)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    out: list[dict[str, str]] = orjson.loads(proc.stdout)
    return out


def test_records_do_not_depend_on_the_blas_kernel() -> None:
    default, *others = (records(core) for core in CORES)
    assert all(len(run) > 1 for run in default)  # (records to compare: not only the dead-letter count)
    for core, other in zip(CORES[1:], others, strict=True):
        for run, a, b in zip(RUNS, default, other, strict=True):
            moved = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            assert not moved, f"{run} with OPENBLAS_CORETYPE={core}: {len(moved)} records differ, {moved[:5]}"
