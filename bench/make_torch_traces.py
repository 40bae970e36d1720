"""Real PyTorch profiler traces of a tiny training job, made on CPU with torch.distributed (gloo): the test
data under tests/data/torch_traces/. Run it with a Python that has torch (not the project's venv; this script
does not import the project):

    /work/torchenv/bin/python bench/make_torch_traces.py --scenario slow_rank --out tests/data/torch_traces

The job is shaped like a Megatron run: ``--pp`` pipeline stages × ``--dp`` data-parallel replicas (global rank
= stage * dp + replica), each stage a few linear layers, a 1F1B schedule over ``--microbatches`` microbatches
with activations and gradients sent between stages (a send paired with a receive in one
``batch_isend_irecv``, as Megatron batches them; a lone send or receive as a plain blocking ``send``/``recv``),
then the gradients all-reduced in each stage's data-parallel group in ``--buckets`` buckets and an SGD step.
``torch.profiler`` runs with a schedule (``--wait``/``--warmup``/``--active``; ``--repeat`` cycles),
``tensorboard_trace_handler`` (gzip) and ``record_shapes`` on (``--no-record-shapes``), so each rank writes its own
trace of the sampled steps; the files are renamed ``rank<R>[.<cycle>].pt.trace.json.gz``.

Scenarios (the slowness is there from step 0): ``healthy``; ``slow_rank`` (one rank, ``--slow-rank``),
``slow_stage`` (every replica of stage ``--slow-stage``), ``slow_replica`` (every stage of replica
``--slow-replica``). Compute runs on an emulated *device*: each layer's forward and backward (one span each,
``layer.forward`` and autograd's ``evaluate_function: DeviceLayerBackward``) does its real (small) tensor work,
then the host idles inside the op's span until the device time of that op has passed (``--device-ms`` forward,
twice that backward), as a host waits on a GPU kernel; a slow rank's device takes ``--slow-factor`` times
longer. Idling uses no CPU, so a slow rank takes no CPU from the others and the healthy ranks' ops last as
long as in the healthy run (on a shared machine with fewer cores than ranks, a CPU-heavy slowdown would slow
every rank, and the traces would not hold the cause the scenario claims). made.json records the load
average while the traces were made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SCENARIOS = ("healthy", "slow_rank", "slow_stage", "slow_replica")


@dataclass(frozen=True)
class Job:
    scenario: str
    pp: int
    dp: int
    microbatches: int
    batch: int  # rows per microbatch
    hidden: int
    layers: int  # linear layers per stage
    buckets: int  # gradient all-reduces per step and data-parallel group
    wait: int
    warmup: int
    active: int
    repeat: int
    slow_factor: float
    device_ms: float  # forward time of a layer on a healthy device (backward: twice)
    slow_rank: int
    slow_stage: int
    slow_replica: int
    seed: int
    record_shapes: bool  # c10d ops then carry their scalar arguments (p2p peer)

    @property
    def world(self) -> int:
        return self.pp * self.dp

    def stage(self, rank: int) -> int:
        return rank // self.dp

    def replica(self, rank: int) -> int:
        return rank % self.dp

    def rank_of(self, stage: int, replica: int) -> int:
        return stage * self.dp + replica

    def factor(self, rank: int) -> float:
        """How many times slower this rank's device is (1 = healthy)."""
        slow = {
            "healthy": False,
            "slow_rank": rank == self.slow_rank,
            "slow_stage": self.stage(rank) == self.slow_stage,
            "slow_replica": self.replica(rank) == self.slow_replica,
        }[self.scenario]
        return self.slow_factor if slow else 1

    @property
    def steps(self) -> int:
        """Training steps run: enough for every profiler cycle, plus one so the last cycle is written."""
        return (self.wait + self.warmup + self.active) * self.repeat + 1


def run_on_device(started: float, device_s: float) -> None:
    """Stay in the op's span until its kernel, started at ``started`` (perf_counter), would have ended."""
    left = started + device_s - time.perf_counter()
    if left > 0:
        time.sleep(left)


class DeviceLayer(torch.autograd.Function):
    """``tanh(x @ w)`` whose forward takes ``device_s`` on the device and whose backward takes twice that."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, device_s: float) -> torch.Tensor:
        t0 = time.perf_counter()
        y = torch.tanh(x @ w)
        ctx.save_for_backward(x, w, y)
        ctx.device_s = device_s
        run_on_device(t0, device_s)
        return y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        t0 = time.perf_counter()
        x, w, y = ctx.saved_tensors
        gz = g * (1 - y * y)
        gx, gw = gz @ w.t(), x.t() @ gz
        run_on_device(t0, 2 * ctx.device_s)
        return gx, gw, None


class Stage:
    """One pipeline stage: ``layers`` :class:`DeviceLayer` s on a device ``factor`` times slower (1: healthy)."""

    def __init__(self, job: Job, rank: int) -> None:
        gen = torch.Generator().manual_seed(job.seed + job.stage(rank))  # replicas start equal
        self.weights = [(torch.randn(job.hidden, job.hidden, generator=gen) / job.hidden**0.5).requires_grad_()
                        for _ in range(job.layers)]  # fmt: skip
        self.device_s = job.device_ms / 1e3 * job.factor(rank)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.weights:
            with torch.profiler.record_function("layer.forward"):
                x = DeviceLayer.apply(x, w, self.device_s)
        return x


class P2P:
    """Pipeline transfers of one rank: Megatron's send_forward / recv_backward / ... helpers."""

    def __init__(self, job: Job, rank: int) -> None:
        self.shape = (job.batch, job.hidden)
        stage, replica = job.stage(rank), job.replica(rank)
        self.prev = job.rank_of(stage - 1, replica) if stage > 0 else None
        self.next = job.rank_of(stage + 1, replica) if stage < job.pp - 1 else None

    def _exchange(self, send: torch.Tensor | None, send_to: int | None, recv_from: int | None) -> torch.Tensor | None:
        """Send and/or receive: both at once through batch_isend_irecv, one alone as a blocking call."""
        send_to = send_to if send is not None else None
        received = torch.empty(self.shape) if recv_from is not None else None
        if send_to is not None and recv_from is not None:
            assert send is not None and received is not None
            ops = [dist.P2POp(dist.isend, send.detach().contiguous(), send_to),
                   dist.P2POp(dist.irecv, received, recv_from)]  # fmt: skip
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        elif send_to is not None:
            assert send is not None
            dist.send(send.detach().contiguous(), send_to)
        elif recv_from is not None:
            assert received is not None
            dist.recv(received, recv_from)
        return received

    def recv_forward(self) -> torch.Tensor | None:
        return self._exchange(None, None, self.prev)

    def send_forward(self, y: torch.Tensor) -> None:
        self._exchange(y, self.next, None)

    def recv_backward(self) -> torch.Tensor | None:
        return self._exchange(None, None, self.next)

    def send_backward(self, g: torch.Tensor | None) -> None:
        self._exchange(g, self.prev, None)

    def send_forward_recv_backward(self, y: torch.Tensor) -> torch.Tensor | None:
        return self._exchange(y, self.next, self.next)

    def send_backward_recv_forward(self, g: torch.Tensor | None) -> torch.Tensor | None:
        return self._exchange(g, self.prev, self.prev)


def train_step(job: Job, rank: int, stage: Stage, p2p: P2P, dp_group: dist.ProcessGroup, gen: torch.Generator) -> None:
    """One 1F1B pipeline step, then the data-parallel gradient all-reduce and an SGD update."""
    first, last = p2p.prev is None, p2p.next is None
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (input, output) per microbatch in flight

    def forward(x: torch.Tensor | None) -> torch.Tensor:
        inp = torch.randn(job.batch, job.hidden, generator=gen) if x is None else x
        inp.requires_grad_(not first)
        out = stage.forward(inp)
        pending.append((inp, out))
        return out

    def backward(g: torch.Tensor | None) -> torch.Tensor | None:
        inp, out = pending.pop(0)
        if last:
            out.square().mean().backward()
        else:
            out.backward(g)
        return None if first else inp.grad

    warmup = min(job.pp - job.stage(rank) - 1, job.microbatches)
    for _ in range(warmup):
        p2p.send_forward(forward(p2p.recv_forward()))
    steady = job.microbatches - warmup
    x = p2p.recv_forward() if steady > 0 else None
    for i in range(steady):
        y = forward(x)
        g = None if last else p2p.send_forward_recv_backward(y)
        grad_in = backward(g)
        if i == steady - 1:
            x = None
            p2p.send_backward(grad_in)
        else:
            x = p2p.send_backward_recv_forward(grad_in)
    for _ in range(warmup):
        p2p.send_backward(backward(p2p.recv_backward()))
    grads = torch.cat([w.grad.reshape(-1) for w in stage.weights if w.grad is not None])
    for bucket in grads.chunk(job.buckets):
        dist.all_reduce(bucket, group=dp_group)
    offset = 0
    with torch.no_grad():
        for w in stage.weights:
            n = w.numel()
            w.sub_(0.01 * grads[offset : offset + n].view_as(w) / job.dp)
            w.grad = None
            offset += n


def worker(rank: int, job: Job, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=job.world)
    # every rank creates every group, in the same order (torch requires it); described as Megatron's are
    dp_groups = [dist.new_group([job.rank_of(s, r) for r in range(job.dp)], group_desc="DATA_PARALLEL_GROUP")
                 for s in range(job.pp)]  # fmt: skip
    for r in range(job.dp):
        dist.new_group([job.rank_of(s, r) for s in range(job.pp)], group_desc="PIPELINE_MODEL_PARALLEL_GROUP")
    stage, p2p = Stage(job, rank), P2P(job, rank)
    gen = torch.Generator().manual_seed(job.seed * 1000 + job.replica(rank))
    schedule = torch.profiler.schedule(wait=job.wait, warmup=job.warmup, active=job.active, repeat=job.repeat)
    handler = torch.profiler.tensorboard_trace_handler(out, worker_name=f"rank{rank}", use_gzip=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(
        activities=activities, schedule=schedule, on_trace_ready=handler, record_shapes=job.record_shapes
    ) as prof:
        for _ in range(job.steps):
            train_step(job, rank, stage, p2p, dp_groups[job.stage(rank)], gen)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collect(raw: Path, dest: Path, job: Job) -> list[Path]:
    """Rename ``rank<R>.<ms>.pt.trace.json.gz`` to ``rank<R>[.<cycle>].pt.trace.json.gz`` in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for rank in range(job.world):
        files = sorted(raw.glob(f"rank{rank}.*.pt.trace.json.gz"), key=lambda p: int(p.name.split(".")[1]))
        for cycle, path in enumerate(files):
            name = f"rank{rank}.pt.trace.json.gz" if len(files) == 1 else f"rank{rank}.{cycle}.pt.trace.json.gz"
            out.append(Path(shutil.move(path, dest / name)))
    return out


def parse_args(argv: list[str]) -> tuple[Job, Path]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=SCENARIOS, default="healthy")
    p.add_argument("--out", type=Path, default=Path("tests/data/torch_traces"), help="a folder per scenario in it")
    p.add_argument("--name", help="the scenario's folder name (default: the scenario)")
    p.add_argument("--pp", type=int, default=3, help="pipeline stages")
    p.add_argument("--dp", type=int, default=2, help="data-parallel replicas")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--batch", type=int, default=64, help="rows per microbatch")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=1, help="linear layers per stage")
    p.add_argument("--buckets", type=int, default=2, help="gradient all-reduces per step")
    p.add_argument("--wait", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=12)
    p.add_argument("--repeat", type=int, default=1, help="profiler cycles (each writes a file per rank)")
    p.add_argument("--slow-factor", type=float, default=2.0, help="how many times slower a slow rank's device is")
    p.add_argument("--device-ms", type=float, default=10.0, help="a layer's forward on a healthy device (backward: 2×)")
    p.add_argument("--slow-rank", type=int, default=3)
    p.add_argument("--slow-stage", type=int, default=1)
    p.add_argument("--slow-replica", type=int, default=1)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--record-shapes", action=argparse.BooleanOptionalAction, default=True)
    a = p.parse_args(argv)
    job = Job(a.scenario, a.pp, a.dp, a.microbatches, a.batch, a.hidden, a.layers, a.buckets, a.wait, a.warmup,
              a.active, a.repeat, a.slow_factor, a.device_ms, a.slow_rank, a.slow_stage, a.slow_replica, a.seed,
              a.record_shapes)  # fmt: skip
    return job, a.out / (a.name or a.scenario)


def main(argv: list[str]) -> None:
    job, dest = parse_args(argv)
    if dest.exists() and any(dest.iterdir()):
        sys.exit(f"make_torch_traces: error: {dest} is not empty: remove it or pass another --name")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="torch-traces-") as raw:
        mp.spawn(worker, args=(job, free_port(), raw), nprocs=job.world, join=True)
        files = collect(Path(raw), dest, job)
    load = {"before": round(load_before, 1), "after": round(os.getloadavg()[0], 1)}  # 1-minute averages
    made = {"torch": torch.__version__, "command": " ".join(["bench/make_torch_traces.py", *argv]),
            "world": job.world, "pp": job.pp, "dp": job.dp, "microbatches": job.microbatches,
            "buckets": job.buckets, "rank": "stage * dp + replica",
            "slow_ranks": [r for r in range(job.world) if job.factor(r) > 1], "slow_factor": job.slow_factor,
            "device_ms": job.device_ms,
            "load_average": load, "cores": os.cpu_count()}  # fmt: skip
    (dest / "made.json").write_text(json.dumps(made, indent=1) + "\n")
    print(f"{len(files)} files, {sum(f.stat().st_size for f in files) / 1024:.0f} KiB in {dest}: {made}")


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(sys.argv[1:])
