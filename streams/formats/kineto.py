"""PyTorch profiler (Kineto) Chrome traces in: one ``.json`` or ``.json.gz`` file per rank (and profiler
cycle), the files Holistic Trace Analysis reads, turned into telemetry envelopes of the event contract.

Mapping (docs/formats.md has the table):

- **rank, world size** from the trace's ``distributedInfo`` (a trace without it is rank 0 of 1);
  process groups from ``distributedInfo.pg_config`` become ``member_of`` topology samples;
- **steps** from the profiler's ``ProfilerStep#N`` annotations: a span belongs to the step during which it
  was *launched* (a GPU kernel via its ``correlation`` with the CUDA runtime launch); one ``step`` sample per
  step from the lowest rank read, lasting until its last span ended;
- **op spans**: GPU kernels, memcpy and memset when the trace has GPU activity, else the CPU ops directly
  under each step annotation. NCCL/gloo collectives (kernels or ops carrying ``Collective name``, also found
  on the enclosing ``record_param_comms`` op) are ``comm`` spans with ``group`` = ``pg<Process Group Name>``
  and ``seq`` = the ``Seq`` argument, or, without one, ``step * 1,000,000 +`` their order in the step within
  the group (collectives run in the same order on every member); ``send``/``recv`` are transfers (``p2p``)
  with their peer (group ranks mapped to global ranks) and ``microbatch`` -1, so the engine pairs the k-th
  send with the k-th receive; an NCCL ``SendRecv`` kernel without a send/recv collective name is a batched
  ``sendrecv``; an NCCL kernel is ``blocking`` (it waits for its peer inside the kernel, so its duration
  includes that wait); memcpy/memset are ``io``; everything else is ``compute``.
- CPU-only (gloo) traces: the ``c10d::`` dispatcher ops are comm, lasting until the end of the wait gloo
  annotated for them; ``pp``/``dp`` and the data-parallel group come from ``pg_config[].pg_desc``
  (:mod:`streams.formats.kineto_c10d`);
- the files of one rank (one per profiler cycle) are merged when no step repeats.
- times: ``baseTimeNanoseconds`` + ``ts`` (µs) as seconds since the epoch.

:func:`read_trace_files` yields the envelopes step by step across ranks (what the engine's watermark wants).
"""

from __future__ import annotations

import bisect
import gzip
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.formats import kineto_c10d as c10d
from streams.formats.errors import FormatError

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
STEP_CATS = ("user_annotation", "cpu_op")
GPU_CATS = {"kernel": "compute", "gpu_memcpy": "io", "gpu_memset": "io"}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
CPU_CATS = ("cpu_op", "user_annotation")
P2P = {"send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "sendrecv": "sendrecv"}
NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
SEQ_STRIDE = 1_000_000
MAX_SPANS_PER_MESSAGE = 50_000
SNIFF_BYTES = 65_536


@dataclass
class Span:
    start: float  # s since the epoch
    duration: float
    op: str
    op_class: str
    group: str = ""
    seq: int = -1
    peer: int = -1
    microbatch: int = -1
    p2p: str = ""  # the contract's transfer direction (send, recv, sendrecv)
    blocking: bool = False


@dataclass
class RankTrace:
    """One rank's trace, as spans per step."""

    path: Path
    rank: int
    world_size: int
    groups: dict[str, list[int]]  # group id -> member ranks (from distributedInfo.pg_config)
    steps: dict[int, tuple[float, float]] = field(default_factory=dict)  # step -> (start, end) s
    spans: dict[int, list[Span]] = field(default_factory=dict)
    dropped: int = 0  # spans outside every step annotation
    coords: dict[str, int] = field(default_factory=dict)  # pp, dp from the process groups' descriptions


def is_trace_file(path: Path) -> bool:
    """Whether ``path`` looks like a Chrome trace (by name, else by its first bytes)."""
    name = path.name.lower()
    if name.endswith((".pt.trace.json", ".pt.trace.json.gz", ".json.gz")):
        return True
    if not name.endswith(".json"):
        return False
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and (b'"traceEvents"' in head or b'"schemaVersion"' in head)


def load(path: Path) -> dict[str, Any]:
    """The trace document; a one-line :class:`FormatError` when it is not a readable Chrome trace."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.lower().endswith(".gz") else path.read_bytes()
        doc = orjson.loads(raw)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise FormatError(f"{path}: cannot read it as a (gzipped) trace: {exc}") from None
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"{path}: not a PyTorch profiler trace: damaged JSON ({exc})") from None
    if type(doc) is not dict or type(doc.get("traceEvents")) is not list:
        raise FormatError(f"{path}: not a PyTorch profiler trace: no traceEvents list (export it with "
                          "torch.profiler's export_chrome_trace or tensorboard_trace_handler)")  # fmt: skip
    return doc


@dataclass
class _Events:
    """A trace's complete ('X') events with numeric ts and dur, split by what they are, in one pass."""

    annotations: list[dict[str, Any]] = field(default_factory=list)  # ProfilerStep#N
    gpu: list[dict[str, Any]] = field(default_factory=list)
    cpu: list[dict[str, Any]] = field(default_factory=list)
    launches: dict[Any, dict[str, Any]] = field(default_factory=dict)  # correlation -> runtime event
    comms: list[dict[str, Any]] = field(default_factory=list)  # record_param_comms ops
    gloo: list[dict[str, Any]] = field(default_factory=list)  # gloo:<op> annotations (waits)
    runloop: set[Any] = field(default_factory=set)  # tids of gloo's own threads
    c10d: list[dict[str, Any]] = field(default_factory=list)  # c10d:: dispatcher ops (also in cpu)

    @classmethod
    def of(cls, events: list[Any]) -> _Events:
        out = cls()
        for e in events:
            ph = e.get("ph") if type(e) is dict else None
            if ph == "M" and e.get("name") == "thread_name" and c10d.RUNLOOP in str(_args(e).get("name")):
                out.runloop.add(e.get("tid"))  # the metadata naming one of gloo's threads
            if ph != "X":
                continue
            ts, dur = e.get("ts"), e.get("dur")
            if not (isinstance(ts, int | float) and isinstance(dur, int | float) and dur >= 0):
                continue
            cat = e.get("cat")
            if cat in GPU_CATS:
                out.gpu.append(e)
            elif cat in LAUNCH_CATS:
                args = e.get("args")
                if type(args) is dict and "correlation" in args:
                    out.launches[args["correlation"]] = e
            elif cat in CPU_CATS:
                name = e.get("name")
                if type(name) is str and name.startswith("ProfilerStep#") and STEP_NAME.match(name):
                    out.annotations.append(e)
                elif cat == "user_annotation" and type(name) is str and name.startswith(c10d.GLOO_PREFIX):
                    out.gloo.append(e)
                else:
                    out.cpu.append(e)
                    if name == "record_param_comms":
                        out.comms.append(e)
                    elif cat == "cpu_op" and type(name) is str and name.startswith(c10d.C10D_PREFIX):
                        out.c10d.append(e)
        return out


def _args(e: dict[str, Any] | None) -> dict[str, Any]:
    args = e.get("args") if e is not None else None
    return args if type(args) is dict else {}


def _group_ranks(text: Any) -> list[int] | None:
    """``Process Group Ranks`` ("[0, 1, 2]"; truncated lists contain "...") as a list, when complete."""
    if isinstance(text, list):
        return [int(r) for r in text]
    if not isinstance(text, str) or "..." in text:
        return None
    try:
        ranks = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return [int(r) for r in ranks] if isinstance(ranks, list) else None


class _Enclosing:
    """``record_param_comms`` ops per thread, to find the one a kernel launch happened in."""

    def __init__(self, comms: list[dict[str, Any]]) -> None:
        self._by_tid: dict[Any, tuple[list[float], list[dict[str, Any]]]] = {}
        for e in sorted(comms, key=lambda e: e["ts"]):
            starts, items = self._by_tid.setdefault(e.get("tid"), ([], []))
            starts.append(e["ts"])
            items.append(e)

    def args_at(self, tid: Any, ts: float) -> dict[str, Any]:
        starts, items = self._by_tid.get(tid, ([], []))
        i = bisect.bisect_right(starts, ts) - 1
        if i >= 0 and ts <= items[i]["ts"] + items[i]["dur"]:
            return _args(items[i])
        return {}


def parse(path: Path, doc: dict[str, Any] | None = None) -> RankTrace:
    """One rank's trace file as spans per step."""
    doc = doc if doc is not None else load(path)
    info: dict[str, Any] = doc["distributedInfo"] if type(doc.get("distributedInfo")) is dict else {}
    try:
        rank, world = int(info.get("rank", 0)), int(info.get("world_size", 1))
    except (TypeError, ValueError):
        raise FormatError(f"{path}: distributedInfo has a rank or world_size that is not a number") from None
    groups = {}
    for pg in info.get("pg_config") or []:
        if type(pg) is dict and "pg_name" in pg and isinstance(pg.get("ranks"), list):
            groups[f"pg{pg['pg_name']}"] = [int(r) for r in pg["ranks"] if isinstance(r, int)]
    layout = c10d.Layout.of(info.get("pg_config"), rank)
    trace = RankTrace(path, rank, world, groups, coords=dict(layout.coords))
    base_s = float(doc.get("baseTimeNanoseconds") or 0) / 1e9
    events = _Events.of(doc["traceEvents"])
    annotations = sorted(events.annotations, key=lambda e: e["ts"])
    if not annotations:
        raise FormatError(f"{path}: no ProfilerStep# annotations: profile with a torch.profiler.schedule and "
                          "call prof.step() once per training step")  # fmt: skip
    starts = [e["ts"] for e in annotations]
    ends = [e["ts"] + e["dur"] for e in annotations]
    numbers = [int(STEP_NAME.match(e["name"]).group(1)) for e in annotations]  # type: ignore[union-attr]
    for e, step in zip(annotations, numbers, strict=True):
        trace.steps[step] = (base_s + e["ts"] / 1e6, base_s + (e["ts"] + e["dur"]) / 1e6)

    def step_of(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        return numbers[i] if i >= 0 and ts <= ends[i] else None

    candidates = _gpu_candidates(events) if events.gpu else _cpu_candidates(events, annotations, layout)
    candidates.sort(key=lambda c: c[0]["ts"])
    order: Counter[tuple[int, str, int]] = Counter()
    for e, anchor, meta, op_class in candidates:
        found = step_of(anchor)
        if found is None:
            trace.dropped += 1
            continue
        step = found
        span = Span(base_s + e["ts"] / 1e6, e["dur"] / 1e6, str(e.get("name") or "?")[:256], op_class)
        if meta is not None:
            _classify(span, meta, step, order, trace.rank, e.get("cat") == "kernel")
        trace.spans.setdefault(step, []).append(span)
    return trace


# (event, the time it was launched, its communication arguments or None when it is not communication, op class)
_Candidate = tuple[dict[str, Any], float, dict[str, Any] | None, str]


def _gpu_candidates(events: _Events) -> list[_Candidate]:
    """GPU kernels, memcpy and memset, each with the CPU time it was launched at."""
    candidates: list[_Candidate] = []
    enclosing = _Enclosing(events.comms)
    for e in events.gpu:
        args = _args(e)
        launch = events.launches.get(args.get("correlation"))
        comm = "Collective name" in args or NCCL_KERNEL.match(str(e.get("name"))) is not None
        if launch is None:
            candidates.append((e, e["ts"], args if comm else None, GPU_CATS[e["cat"]]))
        elif comm:
            merged = {**enclosing.args_at(launch.get("tid"), launch["ts"]), **args}
            candidates.append((e, launch["ts"], merged, GPU_CATS[e["cat"]]))
        else:
            candidates.append((e, launch["ts"], None, GPU_CATS[e["cat"]]))
    return candidates


def _cpu_candidates(events: _Events, annotations: list[dict[str, Any]], layout: c10d.Layout) -> list[_Candidate]:
    """The CPU ops directly under the steps; a c10d op lasts until the end of the wait gloo annotated for it."""
    candidates: list[_Candidate] = []
    waits = c10d.waits(events.c10d, events.gloo, events.runloop)
    inside_batch = -1.0  # µs: ops on the thread before this, within a batched exchange, are part of it
    for e in _under_steps(events.cpu, annotations):
        args = _args(e)
        kind = c10d.collective(e.get("name"))
        wait = waits.get(id(e))
        if kind is not None and wait is not None and wait.batched_with is not None:
            inside_batch = wait.batched_with["ts"]
            meta = {**c10d.meta(args, "sendrecv", layout), c10d.BLOCKING: True}
            candidates.append(({**e, "name": "sendrecv", "dur": wait.end - e["ts"]}, e["ts"], meta, "compute"))
            continue
        if e["ts"] <= inside_batch:
            continue  # the receive of a batched exchange (or what ran between its two halves)
        if kind is not None:
            end, blocking = (wait.end, wait.blocking) if wait is not None else (e["ts"] + e["dur"], False)
            meta = {**c10d.meta(args, kind, layout), **args, c10d.BLOCKING: blocking}  # the trace's args win
            candidates.append(({**e, "dur": max(e["dur"], end - e["ts"])}, e["ts"], meta, "compute"))
            continue
        comm = "Collective name" in args or NCCL_KERNEL.match(str(e.get("name"))) is not None
        candidates.append((e, e["ts"], args if comm else None, "compute"))
    return candidates


def _under_steps(cpu: list[dict[str, Any]], annotations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CPU ops directly under a step annotation, on its thread (nested ops are part of their parent)."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in sorted(cpu, key=lambda e: (e["ts"], -e["dur"])):
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    out = []
    for a in annotations:
        ops = by_thread.get((a.get("pid"), a.get("tid")), [])
        end = a["ts"] + a["dur"]
        covered = -1.0
        for e in ops[bisect.bisect_left(ops, a["ts"], key=lambda e: e["ts"]) :]:
            if e["ts"] > end:
                break
            if e["ts"] >= covered and e["ts"] + e["dur"] <= end:
                out.append(e)
                covered = e["ts"] + e["dur"]
    return out


def _collective(name: str, meta: dict[str, Any]) -> str | None:
    """The collective's name (lower case), or None when the span is not communication. An NCCL SendRecv
    kernel is a send or a recv when its collective name says so, else a batched sendrecv."""
    given = meta.get("Collective name")
    m = NCCL_KERNEL.match(name)
    kernel = m.group(1).lower() if m else None
    if isinstance(given, str) and given and (kernel != "sendrecv" or given.lower() in P2P):
        return given.lower()
    return kernel


def _classify(
    span: Span, meta: dict[str, Any], step: int, order: Counter[tuple[int, str, int]], rank: int, kernel: bool
) -> None:
    collective = _collective(span.op, meta)
    if collective is None:
        return
    span.op_class = "comm"
    span.op = collective
    ranks = _group_ranks(meta.get("Process Group Ranks"))
    if collective in P2P:
        span.op = span.p2p = P2P[collective]
        keys = {"send": ("Dst Rank",), "recv": ("Src Rank",)}.get(span.op, ("Dst Rank", "Src Rank"))
        peers = [meta.get(k) for k in keys]
        mapped = [
            ranks[p] if ranks is not None and p < len(ranks) else p for p in peers if isinstance(p, int) and p >= 0
        ]
        span.peer = next((p for p in mapped if p != rank or span.op != "sendrecv"), -1)
        # an NCCL kernel waits for its peer inside; gloo annotates the wait
        span.blocking = kernel or span.p2p == "sendrecv" or meta.get(c10d.BLOCKING) is True
        return
    name = meta.get("Process Group Name")
    if name is None or name == "":
        return  # no process group: a communication span that joins no barrier
    span.group = f"pg{name}"
    seq = meta.get("Seq")
    if isinstance(seq, int) and seq >= 0:
        span.seq = seq
    else:
        key = (step, span.group, -2)
        span.seq = step * SEQ_STRIDE + order[key]
        order[key] += 1


def _envelope(source: str, seq: int, batches: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": source, "seq": seq, "columns": batches})


def step_messages(trace: RankTrace, job: str, step: int, summary: bool) -> list[bytes]:
    """The envelopes of one rank's step: its op spans (in chunks) and, when ``summary``, the step sample."""
    spans = trace.spans.get(step, [])
    source = f"kineto:{job}/rank{trace.rank}"
    out = []
    for i in range(0, max(1, len(spans)), MAX_SPANS_PER_MESSAGE):
        chunk = spans[i : i + MAX_SPANS_PER_MESSAGE]
        batches = []
        if chunk:
            batches.append({"kind": "op", "n": len(chunk), "data": {
                "job": job, "step": step, "rank": trace.rank,
                "op": [s.op for s in chunk], "op_class": [s.op_class for s in chunk],
                "start": [s.start for s in chunk], "duration": [s.duration for s in chunk],
                "microbatch": [s.microbatch for s in chunk], "group": [s.group for s in chunk],
                "seq": [s.seq for s in chunk], "peer": [s.peer for s in chunk],
                "p2p": [s.p2p for s in chunk], "blocking": [s.blocking for s in chunk], **trace.coords,
            }})  # fmt: skip
        if summary and i == 0:
            start, end = trace.steps[step]
            end = max([end, *(s.start + s.duration for s in spans)])
            batches.append({"kind": "step", "n": 1, "data": {
                "job": job, "step": step, "start": start, "duration": max(end - start, 1e-9),
                "accelerators": trace.world_size,
            }})  # fmt: skip
        if batches:
            out.append(_envelope(source, step * 1000 + i // MAX_SPANS_PER_MESSAGE + 1, batches))
    return out


def topology_message(trace: RankTrace, job: str) -> bytes | None:
    """``member_of`` samples: this rank in each process group that lists it."""
    t0 = min(start for start, _ in trace.steps.values())
    rows = [f"comm:{job}/{g}" for g, members in sorted(trace.groups.items()) if trace.rank in members]
    if not rows:
        return None
    batch = {"kind": "topology", "n": len(rows), "data": {
        "relation": "member_of", "src": f"rank:{job}/{trace.rank}", "dst": rows, "time": t0, "job": job}}  # fmt: skip
    return _envelope(f"kineto:{job}/rank{trace.rank}", 0, [batch])


def read_traces(paths: Iterable[Path]) -> list[RankTrace]:
    """Parse every file; the files of one rank (one per profiler cycle) are merged when no step repeats.
    Refuses a step traced twice for one rank and traces that disagree on the world size."""
    traces: dict[int, RankTrace] = {}
    for path in paths:
        trace = parse(path)
        if trace.rank in traces:
            _merge(traces[trace.rank], trace)
        else:
            traces[trace.rank] = trace
    worlds = {t.world_size for t in traces.values()}
    if len(worlds) > 1:
        raise FormatError(f"the traces disagree on the world size ({sorted(worlds)}): are they of one job?")
    return [traces[r] for r in sorted(traces)]


def _merge(into: RankTrace, cycle: RankTrace) -> None:
    """Add another profiler cycle's file of the same rank."""
    repeated = sorted(set(into.steps) & set(cycle.steps))
    if repeated:
        raise FormatError(f"{cycle.path} and {into.path} both trace step {repeated[0]} of rank {cycle.rank}: "
                          "pass one file per rank and profiler cycle, of one run")  # fmt: skip
    if cycle.world_size != into.world_size:
        raise FormatError(f"{cycle.path} and {into.path} disagree on the world size: are they of one job?")
    into.steps.update(cycle.steps)
    into.spans.update(cycle.spans)
    into.dropped += cycle.dropped
    for group, members in cycle.groups.items():
        into.groups.setdefault(group, members)


def default_job(paths: list[Path]) -> str:
    """The job id when none is given: the name of the directory holding the traces."""
    return paths[0].resolve().parent.name or "kineto"


def read_trace_files(paths: Iterable[Path | str], job: str | None = None) -> Iterator[bytes]:
    """Envelope bytes of the event contract for a job's trace files (one per rank): first each rank's
    process-group membership, then step by step every rank's spans (the lowest rank also sends the step
    summary). Raises :class:`FormatError` (one line) for a file that is not a readable trace."""
    files = [Path(p) for p in paths]
    if not files:
        raise FormatError("no trace files given")
    traces = read_traces(files)
    job = job or default_job(files)
    for trace in traces:
        message = topology_message(trace, job)
        if message is not None:
            yield message
    steps = sorted({s for t in traces for s in t.steps})
    for step in steps:
        for trace in traces:
            if step in trace.steps:
                yield from step_messages(trace, job, step, summary=trace is traces[0])
