"""Turn simulated steps into telemetry: columnar op spans per stage, a step summary, topology once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.sim.training import StepTimes, TrainingFabric

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: event time, never the wall clock
GPUS_PER_NODE = 8
NODES_PER_LEAF = 4
MAX_SPANS_PER_MESSAGE = 40_000  # ~3.4 MB per message: under the 4 MiB the contract accepts


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

    def data(self) -> tuple[int, dict[str, Any]]:
        """(rows, columns): numeric columns stay numpy arrays (orjson writes them natively)."""
        data = {name: np.concatenate(parts) for name, parts in self.columns.items()}
        out = {k: v.tolist() if v.dtype.kind in "OU" else v for k, v in data.items()}
        return len(data["rank"]), out


def node_of(rank: int) -> str:
    return f"node:n{rank // GPUS_PER_NODE}"


def topology(fabric: TrainingFabric, job: str) -> dict[str, Any]:
    lay = fabric.layout
    ranks = range(lay.ranks)
    devices = [f"device:n{r // GPUS_PER_NODE}/gpu{r % GPUS_PER_NODE}" for r in ranks]
    nodes = sorted({node_of(r) for r in ranks}, key=lambda n: int(n[6:]))
    src = [f"rank:{job}/{r}" for r in ranks] + devices + nodes
    dst = devices + [node_of(r) for r in ranks] + [f"switch:leaf{int(n[6:]) // NODES_PER_LEAF}" for n in nodes]
    relation = ["placed_on"] * (2 * lay.ranks) + ["connected_to"] * len(nodes)
    for r in ranks:  # data-parallel communicators: one per (stage, tensor index)
        s, t = (r // lay.tp) % lay.pp, r % lay.tp
        src.append(f"rank:{job}/{r}")
        dst.append(f"comm:{job}/dp-pp{s}-tp{t}")
        relation.append("member_of")
    return {"kind": "topology", "n": len(src), "data": {"relation": relation, "src": src, "dst": dst, "time": T0,
                                                        "job": job}}  # fmt: skip


def stage_spans(fabric: TrainingFabric, times: StepTimes, step: int, s: int, t0: float) -> Spans:
    lay = fabric.layout
    d = np.arange(lay.dp)[:, None]
    t = np.arange(lay.tp)[None, :]
    ranks = lay.rank(d, s, t)  # (dp, tp)
    grid = np.ones((lay.dp, lay.tp))
    spans = Spans.empty()
    per_step = 2 * lay.microbatches  # tp_sync barriers per step in each tensor-parallel group
    tp_group = np.array([[f"tp-dp{i}-pp{s}"] for i in range(lay.dp)])
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
    release = times.allreduce_start[s]
    spans.add(rank=ranks, dp=d * grid, pp=s, tp=t * grid, op="allreduce", op_class="comm", start=t0 + arrive,
              duration=release + times.allreduce_s - arrive, microbatch=-1,
              group=np.array([[f"dp-pp{s}-tp{i}" for i in range(lay.tp)]]), seq=step, peer=-1)  # fmt: skip
    spans.add(rank=ranks, dp=d * grid, pp=s, tp=t * grid, op="optimizer", op_class="compute",
              start=t0 + release + times.allreduce_s, duration=times.optimizer_s * grid, microbatch=-1, group="",
              seq=-1, peer=-1)  # fmt: skip
    return spans


def step_messages(fabric: TrainingFabric, job: str, step: int, t0: float, times: StepTimes,
                  tokens_per_step: float) -> Iterator[tuple[str, bytes, int]]:  # fmt: skip
    """(key, envelope, samples) for one step: a message of op spans per stage, the step summary with the last."""
    for s in range(fabric.layout.pp):
        n, data = stage_spans(fabric, times, step, s, t0).data()
        parts = range(0, n, MAX_SPANS_PER_MESSAGE)
        for part, lo in enumerate(parts):
            chunk = {k: v[lo : lo + MAX_SPANS_PER_MESSAGE] for k, v in data.items()}
            rows = len(chunk["rank"])
            columns: list[dict[str, Any]] = [{"kind": "op", "n": rows, "data": {**chunk, "job": job, "step": step}}]
            last = s == fabric.layout.pp - 1 and part == len(parts) - 1
            if last:
                columns.append({"kind": "step", "n": 1, "data": {
                    "job": job, "step": step, "start": t0, "duration": times.duration,
                    "output_units": tokens_per_step, "accelerators": fabric.layout.ranks}})  # fmt: skip
            source = f"trainer/{job}/stage{s}/part{part}"
            doc = {"schema": TELEMETRY_SCHEMA, "source": source, "seq": step, "columns": columns}
            yield job, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), rows + last
