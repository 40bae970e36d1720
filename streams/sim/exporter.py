"""What a real per-process exporter makes of a simulated step (the realistic mode's telemetry).

Real traces differ from the ideal scenarios' spans in ways a detector must survive, so each is a parameter
of :class:`Exporter` (the adversarial variations a test can turn):

- **which ranks are traced**: one tensor-parallel rank per stage (``traced_tp``), or all of them; a traced
  rank's compute span covers its tensor-parallel peers' waits (as a layer's kernels do); the step summary
  still says how many accelerators the job uses;
- **which steps are traced**: every ``sample_every``-th step (step numbers then have gaps; time runs on);
- **timestamps**: offsets from the step's start, with Gaussian jitter of ``jitter_s`` on each end of a span,
  rounded to ``resolution_s`` and stored as float32 (``float32``), then added to the step's start;
- **batched blocking p2p**: between two ops of a pipeline stage, a send to the neighbour and the receive of
  the next op's input from the same neighbour are one span (``p2p: sendrecv``, ``blocking: true``) that
  lasts until both transfers are done, so it includes the wait for the peer (Megatron's
  ``send_forward_recv_backward``); otherwise a blocking ``send`` then a blocking ``recv``. The microbatch of a
  p2p span is ``-1`` unless ``p2p_microbatch``;
- **batching**: one message per traced rank and step (``rank``), per stage and step (``stage``) or per step
  (``step``); ``shuffle`` permutes the messages of a step and the rows within each message; with ``delay``
  the messages of odd data-parallel replicas arrive that many traced steps late (an exporter that flushes behind).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.sim.training import Array, StepTimes, TrainingFabric

P2P_COLUMNS = ("p2p", "blocking")
BATCHING = ("rank", "stage", "step")


@dataclass(frozen=True)
class Exporter:
    sample_every: int = 5
    traced_tp: int | None = 0  # None: every tensor-parallel rank is traced
    jitter_s: float = 2e-6
    resolution_s: float = 4e-6
    float32: bool = True
    batching: str = "rank"
    shuffle: bool = False
    p2p_microbatch: bool = False
    delay: int = 0  # the messages of odd replicas arrive this many traced steps late

    def __post_init__(self) -> None:
        if self.sample_every < 1:
            raise ValueError("exporter sample_every must be 1 or more")
        if self.batching not in BATCHING:
            raise ValueError(f"exporter batching must be one of {', '.join(BATCHING)}")
        if self.jitter_s < 0 or self.resolution_s < 0 or self.delay < 0:
            raise ValueError("exporter jitter_s, resolution_s and delay must be 0 or more")

    def traces(self, step: int) -> bool:
        return step % self.sample_every == 0

    @classmethod
    def parse(cls, text: str) -> Exporter:
        """``key=value,key=value`` (keys: the fields; ``traced_tp=all`` traces every tensor-parallel rank)."""
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for item in (i.strip() for i in text.split(",") if i.strip()):
            key, sep, raw = item.partition("=")
            if not sep or key not in kinds:
                raise ValueError(f"exporter option {item!r}: give key=value with key one of {', '.join(kinds)}")
            try:
                values[key] = _value(str(kinds[key]), raw)
            except ValueError as exc:
                raise ValueError(f"exporter option {item!r}: {exc}") from exc
        return cls(**values)


def _value(kind: str, raw: str) -> Any:
    if kind == "bool":
        if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise ValueError("expected true or false")
        return raw.lower() in ("1", "true", "yes")
    if kind.startswith("int"):
        return None if raw == "all" and "None" in kind else int(raw)
    return float(raw) if kind == "float" else raw


@dataclass
class RankSpans:
    """Columns of one stage's traced spans (row per span and replica), offsets relative to the step start."""

    columns: dict[str, list[npt.NDArray[Any]]]
    dp: int

    def add(self, **cols: Any) -> None:
        for name, value in cols.items():
            self.columns.setdefault(name, []).append(np.broadcast_to(np.asarray(value), (self.dp,)))

    def data(self) -> dict[str, npt.NDArray[Any]]:
        return {name: np.concatenate(parts) for name, parts in self.columns.items()}


def stage_spans(fabric: TrainingFabric, times: StepTimes, step: int, s: int, t: int,
                alone: bool) -> dict[str, npt.NDArray[Any]]:  # fmt: skip
    """Spans of the tensor index ``t`` rank of stage ``s`` in every replica, in its order of occurrence;
    ``start``/``end`` relative to the step start. ``alone``: the only traced rank of its tensor-parallel group
    (its compute spans last until its slowest peer is done); else its own compute, then a ``tp_sync`` wait."""
    lay = fabric.layout
    per_step = 2 * lay.microbatches  # tp_sync barriers per step in each tensor-parallel group
    d = np.arange(lay.dp)
    spans = RankSpans({}, lay.dp)
    common = {"rank": lay.rank(d, s, t), "dp": d, "pp": s, "tp": t}

    def p2p(kind: str, peer: int, start: Array, end: Array) -> None:
        spans.add(**common, op=kind, op_class="comm", start=start, end=end, microbatch=-1, group="", seq=-1,
                  peer=lay.rank(d, peer, t), p2p=kind, blocking=True)  # fmt: skip

    clock: Array = np.zeros(lay.dp)
    sending: int | None = None  # the neighbour the previous op's output goes to
    for index, (kind, _, m) in enumerate(key for key in times.compute if key[1] == s):  # this stage's 1F1B order
        begin, end = times.start[(kind, s, m)], times.end[(kind, s, m)]
        source = _neighbour(s - 1 if kind == "F" else s + 1, lay.pp)
        if sending is not None and sending == source:  # batched: one span until both transfers are done
            p2p("sendrecv", source, clock, begin)
        else:
            if sending is not None:
                sent = clock + times.link[:, min(s, sending)]
                p2p("send", sending, clock, sent)
                clock = sent
            if source is not None:
                p2p("recv", source, clock, begin)
        own = end if alone else begin + times.compute[(kind, s, m)][:, t]
        spans.add(**common, op="forward" if kind == "F" else "backward", op_class="compute", start=begin, end=own,
                  microbatch=m, group="", seq=-1, peer=-1, p2p="", blocking=False)  # fmt: skip
        if not alone:
            spans.add(**common, op="tp_sync", op_class="sync", start=own, end=end, microbatch=m,
                      group=np.array([f"tp-dp{i}-pp{s}" for i in range(lay.dp)]), seq=step * per_step + index,
                      peer=-1, p2p="", blocking=False)  # fmt: skip
        clock, sending = end, _neighbour(s + 1 if kind == "F" else s - 1, lay.pp)
    if sending is not None:
        p2p("send", sending, clock, clock + times.link[:, min(s, sending)])
    release = times.allreduce_start[:, s] + times.allreduce_s
    spans.add(**common, op="allreduce", op_class="comm", start=times.allreduce_arrive[:, s], end=release,
              microbatch=-1, group=f"dp-pp{s}-tp{t}", seq=step, peer=-1, p2p="", blocking=False)  # fmt: skip
    spans.add(**common, op="optimizer", op_class="compute", start=release, end=release + times.optimizer_s,
              microbatch=-1, group="", seq=-1, peer=-1, p2p="", blocking=False)  # fmt: skip
    return spans.data()


def _neighbour(stage: int, stages: int) -> int | None:
    return stage if 0 <= stage < stages else None


def recorded(exporter: Exporter, data: dict[str, npt.NDArray[Any]], step_start: float,
             rng: np.random.Generator) -> dict[str, npt.NDArray[Any]]:  # fmt: skip
    """The spans as the exporter records them: jittered, rounded, float32 offsets; absolute ``start`` and a
    ``duration`` (never negative) in place of ``end``."""
    ends = np.stack([data["start"], data["end"]])
    if exporter.jitter_s:
        ends = ends + rng.normal(0.0, exporter.jitter_s, size=ends.shape)
    if exporter.resolution_s:
        ends = np.round(ends / exporter.resolution_s) * exporter.resolution_s
    if exporter.float32:
        ends = ends.astype(np.float32)
    start, end = ends[0], np.maximum(ends[1], ends[0])
    out = {k: v for k, v in data.items() if k not in ("start", "end")}
    out["start"] = step_start + start.astype(np.float64)
    out["duration"] = (end - start).astype(np.float64)
    if exporter.p2p_microbatch:  # a p2p span labelled with the microbatch of the compute it precedes
        compute = np.flatnonzero(out["op_class"] == "compute")
        following = np.searchsorted(compute, np.arange(len(start)))
        nearest = compute[np.minimum(following, len(compute) - 1)]
        out["microbatch"] = np.where(out["p2p"] != "", out["microbatch"][nearest], out["microbatch"])
    return out
