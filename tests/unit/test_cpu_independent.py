"""The records do not depend on the machine's CPU: the same scenarios give the same record ids and bodies
whichever kernels OpenBLAS picks (it picks by CPU; ``OPENBLAS_CORETYPE`` forces the choice here) and with or
without numpy's AVX-512 loops (``NPY_DISABLE_CPU_FEATURES`` turns them off; on a CPU without AVX-512 that run
is the default's again). A worker's trail, and a post-mortem ``replay`` or ``analyze`` on another machine, are
then the same records."""

import os
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
# (scenario, seed, ranks, steps): those whose records differed between CPUs (their early-warning, seasonal
# and change-point findings), at sizes small enough for three runs each
RUNS = [("inference-sla", 1, 16, 60), ("control-storm", 1, 32, 60), ("training-fabric", 1, 16, 60)]
RUNS += [("serving-saturation", 1, 16, 100), ("serving-saturation", 2, 16, 100)]  # (seed 2: its noise's exp)
# the default (OpenBLAS' and numpy's own choices for this CPU), then each variation of it
CPUS = ({}, {"OPENBLAS_CORETYPE": "Prescott"}, {"OPENBLAS_CORETYPE": "Sandybridge"})
CPUS += ({"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512_SKX"},)
PROGRAM = "import orjson, sys; from bench.fingerprint import run_of; "
PROGRAM += "sys.stdout.buffer.write(orjson.dumps([run_of(*run) for run in orjson.loads(sys.argv[1])]))"


def records(cpu: dict[str, str]) -> list[dict[str, str]]:
    """Record hashes (type and id -> body hash) of every run in ``RUNS``, in a process whose OpenBLAS and numpy
    pick their kernels as ``cpu`` says."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    env |= cpu
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


def test_records_do_not_depend_on_the_blas_kernel_nor_numpys_simd() -> None:
    default, *others = (records(cpu) for cpu in CPUS)
    assert all(len(run) > 1 for run in default)  # (records to compare: not only the dead-letter count)
    for cpu, other in zip(CPUS[1:], others, strict=True):
        for run, a, b in zip(RUNS, default, other, strict=True):
            moved = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            assert not moved, f"{run} with {cpu}: {len(moved)} records differ, {moved[:5]}"
