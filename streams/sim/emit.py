"""Turn simulated steps into telemetry: columnar op spans per stage, per-device power and utilisation per
stage, a step summary, topology once (and again for ranks that move).

Device power is modelled as idle + (peak - idle) × utilisation, where utilisation is the device's own
compute (forward, backward, optimizer) over its step; a node's power cap clamps its devices."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.contract.sizing import split_by_size
from streams.sim.base import T0, envelope, metrics
from streams.sim.training import Array, Layout, StepTimes, TrainingFabric

GPUS_PER_NODE = 8
NODES_PER_LEAF = 4
IDLE_W, PEAK_W = 90.0, 700.0  # per accelerator


@dataclass
class Spans:
    """Columns of op spans being assembled for one stage of one step."""

    columns: dict[str, list[npt.NDArray[Any]]]

    @classmethod
    def empty(cls) -> Spans:
        names = ("rank", "dp", "pp", "tp", "op", "op_class", "start", "duration", "microbatch", "group", "seq", "peer")
        return cls({n: [] for n in names})

    def add(self, **cols: Any) -> None:
        shape = np.broadcast_shapes(*(np.shape(v) for v in cols.values()))
        for name, value in cols.items():
            self.columns[name].append(np.broadcast_to(np.asarray(value), shape).ravel())

    def data(self, until: float | None = None) -> tuple[int, dict[str, Any]]:
        """(rows, columns): numeric columns stay numpy arrays (orjson writes them natively). ``until``: only
        the spans that ended by then (a step cut short by a failure)."""
        data = {name: np.concatenate(parts) for name, parts in self.columns.items()}
        if until is not None:
            done = data["start"] + data["duration"] <= until
            data = {k: v[done] for k, v in data.items()}
        out = {k: v.tolist() if v.dtype.kind in "OU" else v for k, v in data.items()}
        return len(data["rank"]), out


def node_of(rank: int) -> str:
    return f"node:n{rank // GPUS_PER_NODE}"


def placement(job: str, ranks: list[int], nodes: list[int], time: float) -> dict[str, Any]:
    """Topology: each rank on its device (GPU ``rank % 8`` of node ``nodes[i]``), each device on its node,
    each node on its leaf switch."""
    devices = [f"device:n{n}/gpu{r % GPUS_PER_NODE}" for r, n in zip(ranks, nodes, strict=True)]
    hosts = sorted(set(nodes))
    src = [f"rank:{job}/{r}" for r in ranks] + devices + [f"node:n{n}" for n in hosts]
    dst = devices + [f"node:n{n}" for n in nodes] + [f"switch:leaf{n // NODES_PER_LEAF}" for n in hosts]
    relation = ["placed_on"] * (2 * len(ranks)) + ["connected_to"] * len(hosts)
    return {"kind": "topology", "n": len(src), "data": {"relation": relation, "src": src, "dst": dst, "time": time,
                                                        "job": job}}  # fmt: skip


def topology(fabric: TrainingFabric, job: str) -> list[dict[str, Any]]:
    """Placement of every rank, then communicator membership: data-parallel (one per stage and tensor
    index) and tensor-parallel (one per replica and stage)."""
    lay = fabric.layout
    ranks = list(range(lay.ranks))
    src, dst = [], []
    for r in ranks:
        d, s, t = r // (lay.pp * lay.tp), (r // lay.tp) % lay.pp, r % lay.tp
        src += [f"rank:{job}/{r}", f"rank:{job}/{r}"]
        dst += [f"comm:{job}/dp-pp{s}-tp{t}", f"comm:{job}/tp-dp{d}-pp{s}"]
    members = {"relation": "member_of", "src": src, "dst": dst, "time": T0, "job": job}
    return [placement(job, ranks, [r // GPUS_PER_NODE for r in ranks], T0),
            {"kind": "topology", "n": len(src), "data": members}]  # fmt: skip


@functools.lru_cache(maxsize=256)
def _tp_groups(dp: int, s: int) -> npt.NDArray[np.str_]:
    """(dp, 1) ids of stage ``s``'s tensor-parallel groups, built once per layout and stage."""
    return np.array([f"tp-dp{i}-pp{s}" for i in range(dp)])[:, None]


def stage_spans(fabric: TrainingFabric, times: StepTimes, step: int, s: int, t0: float | Array) -> Spans:
    """Op spans of stage ``s``; ``t0``: the step's start, or per replica a (dp, 1) array of starts."""
    lay = fabric.layout
    d = np.arange(lay.dp)[:, None]
    t = np.arange(lay.tp)[None, :]
    ranks = lay.rank(d, s, t)  # (dp, tp)
    grid = np.ones((lay.dp, lay.tp), np.int64)  # integer columns must stay integers (the fast decoder insists)
    spans = Spans.empty()
    per_step = 2 * lay.microbatches  # tp_sync barriers per step in each tensor-parallel group
    tp_group = _tp_groups(lay.dp, s)
    ops = [key for key in times.compute if key[1] == s]  # this stage's 1F1B order
    for index, (kind, _, m) in enumerate(ops):
        own = times.compute[(kind, s, m)]
        begin = times.start[(kind, s, m)][:, None] * grid
        op = "forward" if kind == "F" else "backward"
        common = {"rank": ranks, "dp": d * grid, "pp": s, "tp": t * grid, "microbatch": m, "group": "", "seq": -1}
        spans.add(**common, op=op, op_class="compute", start=t0 + begin, duration=own, peer=-1)
        stage_end = times.end[(kind, s, m)][:, None] * grid
        waited = np.maximum(0.0, stage_end - begin - own)  # for the slowest tensor rank, 0 (not -1e-17)
        spans.add(**{**common, "group": tp_group, "seq": step * per_step + index}, op="tp_sync", op_class="sync",
                  start=t0 + begin + own, duration=waited, peer=-1)  # fmt: skip
        to = s + 1 if kind == "F" else s - 1
        if 0 <= to < lay.pp:
            link = times.link[:, min(s, to)][:, None] * grid
            spans.add(**common, op="send", op_class="comm", start=t0 + stage_end, duration=link,
                      peer=lay.rank(d, to, t) * grid)  # fmt: skip
        came = times.arrive[(kind, s, m)]
        frm = s - 1 if kind == "F" else s + 1
        if 0 <= frm < lay.pp:
            link = times.link[:, min(s, frm)]
            spans.add(**common, op="recv", op_class="comm", start=t0 + (came - link)[:, None] * grid,
                      duration=link[:, None] * grid, peer=lay.rank(d, frm, t) * grid)  # fmt: skip
    arrive = times.allreduce_arrive[:, s][:, None] * grid
    release = times.allreduce_start[:, s][:, None]
    spans.add(rank=ranks, dp=d * grid, pp=s, tp=t * grid, op="allreduce", op_class="comm", start=t0 + arrive,
              duration=release + times.allreduce_s - arrive, microbatch=-1,
              group=np.array([[f"dp-pp{s}-tp{i}" for i in range(lay.tp)]]), seq=step, peer=-1)  # fmt: skip
    spans.add(rank=ranks, dp=d * grid, pp=s, tp=t * grid, op="optimizer", op_class="compute",
              start=t0 + release + times.allreduce_s, duration=times.optimizer_s * grid, microbatch=-1, group="",
              seq=-1, peer=-1)  # fmt: skip
    return spans


def stage_metrics(fabric: TrainingFabric, times: StepTimes, s: int, t0: float | Array, job: str,
                  devices: list[str], caps: Array) -> list[dict[str, Any]]:  # fmt: skip
    """``power_w`` and ``util`` of the devices of stage ``s`` (``devices``/``caps``: per rank of the stage in
    (replica, tensor index) order; caps in W, inf when uncapped), sampled when each replica ends the step."""
    busy = sum((own for (_, stage, _), own in times.compute.items() if stage == s), start=np.zeros(1))
    length = times.replica_end[:, None]  # (dp, 1)
    util = np.minimum(1.0, (busy + times.optimizer_s) / length).ravel()
    power = np.minimum(IDLE_W + (PEAK_W - IDLE_W) * util, caps)
    time = (t0 + length * np.ones_like(busy)).ravel()
    return [metrics(devices, "power_w", power, time, "W", job), metrics(devices, "util", util, time, "1", job)]


def stage_devices(layout: Layout, s: int, node_of_rank: dict[int, int]) -> tuple[list[str], list[int]]:
    """(device ids, node indices) of stage ``s``'s ranks in (replica, tensor index) order; ``node_of_rank``
    overrides where a rank runs (after a restart onto a spare node)."""
    ranks = layout.rank(np.arange(layout.dp)[:, None], s, np.arange(layout.tp)[None, :]).ravel().tolist()
    nodes = [node_of_rank.get(r, r // GPUS_PER_NODE) for r in ranks]
    return [f"device:n{n}/gpu{r % GPUS_PER_NODE}" for r, n in zip(ranks, nodes, strict=True)], nodes


def step_messages(fabric: TrainingFabric, job: str, step: int, t0: float | Array, times: StepTimes,
                  summary: dict[str, Any], devices: list[tuple[list[str], Array]], incarnation: int = 0,
                  until: float | None = None) -> Iterator[tuple[bytes, int]]:  # fmt: skip
    """(envelope, samples) for one step: per stage, its op spans (in as few parts as keep each message under Kafka's
    default size, :mod:`sizing`) and a message of its devices' power and utilisation (``devices``: per stage, the
    device ids and power caps); the step ``summary`` goes with the last stage's spans. ``incarnation`` > 0 names the
    processes of the n-th restart (new sources, so re-run steps are not duplicates); ``until``: the step failed
    then: only the spans that ended by then, and no device samples."""
    suffix = f"/restart{incarnation}" if incarnation else ""
    for s in range(fabric.layout.pp):
        n, data = stage_spans(fabric, times, step, s, t0).data(until)
        with_summary = s == fabric.layout.pp - 1

        def encode(part: int, parts: int, lo: int, hi: int, s: int = s, data: dict[str, Any] = data,
                   with_summary: bool = with_summary) -> bytes:  # fmt: skip
            chunk = {k: v[lo:hi] for k, v in data.items()}
            spans = {"kind": "op", "n": hi - lo, "data": {**chunk, "job": job, "step": step}}
            columns: list[dict[str, Any]] = [spans]
            if with_summary and part == parts - 1:
                columns.append({"kind": "step", "n": 1, "data": summary})
            return envelope(f"trainer/{job}/stage{s}/part{part}{suffix}", step, columns)

        messages = split_by_size(n, encode)
        for part, value in enumerate(messages):
            lo, hi = n * part // len(messages), n * (part + 1) // len(messages)
            yield value, hi - lo + (with_summary and part == len(messages) - 1)
        if until is None:
            batches = stage_metrics(fabric, times, s, t0, job, *devices[s])
            yield envelope(f"exporter/{job}/stage{s}{suffix}", step, batches), sum(b["n"] for b in batches)
