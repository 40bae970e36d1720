"""Small hand-written PyTorch profiler (Kineto) traces that follow the documented Chrome-trace format (torch
CPU wheels cannot be fetched here): per rank a ``distributedInfo`` block, ``ProfilerStep#N`` user annotations
on the main thread, ``cudaLaunchKernel`` runtime events linked by ``correlation`` to GPU kernels (which run
after the launch, some after the step annotation ended), NCCL all-reduce kernels with their process-group
arguments, and optionally pipeline ``send``/``recv`` whose peers are on the enclosing ``record_param_comms``
CPU op. A straggler rank's compute is slower; the all-reduce ends for everyone when the last member arrives.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import orjson

BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01 in ns


def rank_trace(
    rank: int,
    world: int,
    steps: range,
    straggler: int | None = None,
    p2p: bool = False,
    seed: int = 1,
    kernels: int = 2,
) -> dict[str, Any]:
    rng = random.Random(seed * 1000 + rank)
    events: list[dict[str, Any]] = []
    correlation = 0
    ranks_text = "[" + ", ".join(map(str, range(world))) + "]"
    step_us = 200_000.0
    for step in steps:
        t0 = (step - steps.start) * step_us  # µs after baseTimeNanoseconds
        cpu, gpu = t0 + 5.0, t0 + 40.0
        annotation_end = t0 + 400.0  # the CPU step ends long before the GPU work it launched
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": annotation_end - t0, "args": {}})  # fmt: skip
        half = max(1, kernels // 2)  # forward kernels take a third of the compute, backward two thirds
        work = [(f"sm90_gemm_fwd_{i}", 30_000.0 / half) for i in range(half)]
        work += [(f"sm90_gemm_bwd_{i}", 60_000.0 / (kernels - half or 1)) for i in range(kernels - half or 1)]
        slow = 1.5 if rank == straggler else 1.0
        for name, base in work:
            correlation += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": cpu, "dur": 4.0, "args": {"correlation": correlation}})  # fmt: skip
            dur = base * slow * (1 + rng.uniform(0, 0.01))
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": gpu, "dur": dur,
                           "args": {"correlation": correlation, "device": 0, "stream": 7}})  # fmt: skip
            cpu += 10.0 / half
            gpu += dur + 2.0 / half
        if p2p:
            peer = rank ^ 1
            op = "send" if rank % 2 == 0 else "recv"
            correlation += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                           "ts": cpu - 1, "dur": 8.0,
                           "args": {"Collective name": op, "Process Group Name": "0", "Process Group Ranks": ranks_text,
                                    "Src Rank": rank if op == "send" else peer,
                                    "Dst Rank": peer if op == "send" else rank}})  # fmt: skip
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": cpu, "dur": 4.0, "args": {"correlation": correlation}})  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "pid": 0, "tid": 9,
                           "ts": gpu, "dur": 150.0, "args": {"correlation": correlation, "device": 0}})  # fmt: skip
            cpu += 10.0
            gpu += 152.0
        correlation += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": cpu, "dur": 4.0, "args": {"correlation": correlation}})  # fmt: skip
        last_arrival = 40.0 + 90_000.0 * (1.5 if straggler is not None else 1.0) * 1.01 + 4 + (152 if p2p else 0)
        end = t0 + last_arrival + 8000.0
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                       "tid": 8, "ts": gpu, "dur": end - gpu,
                       "args": {"correlation": correlation, "device": 0, "Collective name": "allreduce",
                                "Process Group Name": "0", "Process Group Description": "default_pg",
                                "Process Group Ranks": ranks_text, "Group size": world, "dtype": "Float",
                                "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20}})  # fmt: skip
    events.append({"ph": "i", "name": "Iteration Start: PyTorch Profiler", "ts": 0, "s": "g", "pid": 1, "tid": 1})
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85_000_000_000}],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": world,
                    "ranks": list(range(world)),
                }
            ],
            "nccl_version": "2.21.5",
        },
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
        "traceName": f"rank{rank}.pt.trace.json",
    }


def write_job(directory: Path, world: int, steps: range, gz_every: int = 2, **options: Any) -> list[Path]:
    """One trace per rank in ``directory`` (every ``gz_every``-th one gzipped)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(world):
        data = orjson.dumps(rank_trace(rank, world, steps, **options))
        if gz_every and rank % gz_every == gz_every - 1:
            path = directory / f"host-{rank}.{rank}.pt.trace.json.gz"
            path.write_bytes(gzip.compress(data))
        else:
            path = directory / f"host-{rank}.{rank}.pt.trace.json"
            path.write_bytes(data)
        paths.append(path)
    return paths
