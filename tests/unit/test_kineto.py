"""PyTorch profiler (Kineto) traces → envelopes of the event contract."""

from __future__ import annotations

import gzip
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.contract.envelope import decode_telemetry
from streams.formats.errors import FormatError
from streams.formats.kineto import is_trace_file, read_trace_files
from streams.testing import run_stream
from tests.kineto_traces import rank_trace, write_job


def rows(messages: list[bytes]) -> dict[str, list[dict[str, Any]]]:
    """Every sample by kind (columns expanded)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in messages:
        for batch in orjson.loads(m)["columns"]:
            n, data = batch["n"], batch["data"]
            for i in range(n):
                out[batch["kind"]].append({k: v[i] if isinstance(v, list) else v for k, v in data.items()})
    return out


def test_every_envelope_passes_the_contract_and_the_engine_takes_it(tmp_path: Path) -> None:
    paths = write_job(tmp_path / "llm", world=8, steps=range(100, 130), straggler=5)
    messages = list(read_trace_files(paths))
    for m in messages:
        assert not decode_telemetry(m).rejects
    out = run_stream(("telemetry", m) for m in messages)
    assert not out.dead_letters
    got = rows(messages)
    assert out.samples_by_kind["op"] == len(got["op"]) == 8 * 30 * 3
    assert {r["job"] for r in got["op"]} == {"llm"}  # the directory's name
    kinds = {f.body["kind"] for f in out.audit if f.type == "finding"}
    assert "straggler" in kinds, kinds
    subjects = {s for f in out.audit if f.type == "finding" and f.body["kind"] == "straggler"
                for s in f.body["subjects"]}  # fmt: skip
    assert "rank:llm/5" in subjects


def test_collective_members_meet_and_steps_come_from_the_annotations(tmp_path: Path) -> None:
    paths = write_job(tmp_path / "j", world=4, steps=range(7, 10))
    got = rows(list(read_trace_files(paths, job="j")))
    comm = [r for r in got["op"] if r["op_class"] == "comm"]
    assert {r["op"] for r in comm} == {"allreduce"}
    by_instance: dict[tuple[str, int], set[int]] = defaultdict(set)
    for r in comm:
        by_instance[(r["group"], r["seq"])].add(r["rank"])
    assert all(v == {0, 1, 2, 3} for v in by_instance.values()) and len(by_instance) == 3  # one per step
    assert {r["step"] for r in got["op"]} == {7, 8, 9}
    # kernels run after their step's CPU annotation ended, yet belong to the step that launched them
    assert all(r["step"] == 7 for r in got["op"] if r["start"] < 1_767_225_600.2)
    steps = got["step"]
    assert [s["step"] for s in steps] == [7, 8, 9] and {s["accelerators"] for s in steps} == {4}
    ends = {r["step"]: max(o["start"] + o["duration"] for o in got["op"] if o["step"] == r["step"]) for r in steps}
    assert all(abs(s["start"] + s["duration"] - ends[s["step"]]) < 1e-6 for s in steps)
    members = {r["src"]: r["dst"] for r in got["topology"]}
    assert members == {f"rank:j/{r}": "comm:j/pg0" for r in range(4)}


def test_p2p_becomes_transfers_with_mapped_peers(tmp_path: Path) -> None:
    paths = write_job(tmp_path / "pp", world=2, steps=range(2), p2p=True)
    got = rows(list(read_trace_files(paths)))
    transfers = sorted((r["rank"], r["p2p"], r["peer"], r["microbatch"], r["step"]) for r in got["op"]
                       if r["op"] in ("send", "recv"))  # fmt: skip
    # no microbatch: the engine pairs the k-th send with the k-th recv of the step
    assert transfers == [(0, "send", 1, -1, 0), (0, "send", 1, -1, 1), (1, "recv", 0, -1, 0), (1, "recv", 0, -1, 1)]
    assert all(r["blocking"] for r in got["op"] if r["p2p"])  # an NCCL kernel waits for its peer inside


def test_a_sendrecv_kernel_outside_a_send_or_recv_is_a_batched_blocking_exchange(tmp_path: Path) -> None:
    docs = [rank_trace(r, 2, range(1), p2p=True) for r in range(2)]
    for doc in docs:  # batch_isend_irecv: one coalesced call launches one SendRecv kernel
        for e in doc["traceEvents"]:
            if e.get("name") == "record_param_comms":
                e["args"]["Collective name"] = "coalesced"
    paths = []
    for r, doc in enumerate(docs):
        paths.append(tmp_path / f"rank{r}.pt.trace.json")
        paths[-1].write_bytes(orjson.dumps(doc))
    got = rows(list(read_trace_files(paths, job="j")))
    exchanges = sorted((r["rank"], r["op"], r["p2p"], r["peer"], r["blocking"]) for r in got["op"] if r["p2p"])
    assert exchanges == [(0, "sendrecv", "sendrecv", 1, True), (1, "sendrecv", "sendrecv", 0, True)]


def test_cpu_only_traces_give_top_level_cpu_ops(tmp_path: Path) -> None:
    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 1, "dur": 40},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 2, "dur": 30},  # nested
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": 50, "dur": 20,
         "args": {"Collective name": "allreduce", "Process Group Name": "0", "Seq": 12}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 2, "ts": 5, "dur": 5},  # other thread
    ]}  # fmt: skip
    path = tmp_path / "cpu.json"
    path.write_bytes(orjson.dumps(doc))
    got = rows(list(read_trace_files([path])))
    assert [(r["op"], r["op_class"], r["group"], r["seq"]) for r in got["op"]] == [
        ("aten::linear", "compute", "", -1), ("allreduce", "comm", "pg0", 12)]  # fmt: skip


def test_detects_traces_by_name_or_content(tmp_path: Path) -> None:
    plain = tmp_path / "x.json"
    plain.write_bytes(orjson.dumps(rank_trace(0, 1, range(1))))
    jsonl = tmp_path / "rows.json"
    jsonl.write_text('{"kind": "metric", "entity": "device:a", "name": "p", "value": 1, "time": 1}\n')
    assert is_trace_file(plain) and is_trace_file(tmp_path / "r.pt.trace.json.gz")
    assert not is_trace_file(jsonl) and not is_trace_file(tmp_path / "a.parquet")


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("cut.pt.trace.json", b'{"traceEvents": [{"ph": "X", ', "damaged JSON"),
        ("bad.json.gz", b"not gzip at all", "cannot read it"),
        ("cut.json.gz", gzip.compress(b'{"traceEvents": []}', mtime=0)[:-6], "cannot read it"),
        ("other.json", b'{"schemaVersion": 1, "events": []}', "no traceEvents"),
        (
            "nosteps.json",
            b'{"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "ts": 1, "dur": 1}]}',
            "no ProfilerStep#",
        ),
    ],
)
def test_unreadable_files_are_one_line_errors(tmp_path: Path, name: str, content: bytes, says: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(FormatError) as info:
        list(read_trace_files([path]))
    assert says in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_two_files_of_one_rank_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for p in (a, b):
        p.write_bytes(orjson.dumps(rank_trace(3, 4, range(1))))
    with pytest.raises(FormatError, match="both trace step 0 of rank 3"):
        list(read_trace_files([a, b]))


def test_produce_refuses_a_damaged_trace_before_connecting(tmp_path: Path) -> None:
    from tests.unit.test_cli import run

    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(b'{"schemaVersion": 1, "traceEvents": [{"ph": "X",')
    proc = run("produce", str(path), "--kind", "op", env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("driftlog: error:") and proc.stderr.strip().count("\n") == 0
    assert "damaged JSON" in proc.stderr


def test_analyze_reads_profiler_traces_and_finds_the_straggler(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from audit.query import run_query
    from streams.cli import cli

    paths = write_job(tmp_path / "llm", world=8, steps=range(100, 140), straggler=5)
    db = tmp_path / "traces.duckdb"
    result = CliRunner().invoke(cli, ["analyze", *map(str, reversed(paths)), "--db", str(db)],
                                env={"DRIFTLOG_HOME": str(tmp_path / "home")})  # fmt: skip
    assert result.exit_code == 0, result.output
    found = run_query(db, "SELECT kind, subjects FROM findings WHERE kind = 'straggler'").rows
    assert found and found[0][1][0] == "rank:llm/5"


# ---------------------------------------------------------------- gloo (CPU) traces: c10d ops and gloo's waits


def gloo_rank(rank: int, pg_config: list[dict[str, Any]], shift: float = 0.0) -> dict[str, Any]:
    """A CPU trace as torch writes it over gloo: c10d ops on the training thread (tid 1), gloo:<op>
    annotations of the waits (p2p on the training thread, collectives on pt_gloo_runloop threads 7 and 8)."""

    def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts + shift, "dur": dur, "args": args}

    peer = ["", "", str(1 - rank), "0"]
    return {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2, "pg_config": pg_config},
            "baseTimeNanoseconds": 1_767_225_600_000_000_000, "traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "thread 7 (pt_gloo_runloop)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 8, "args": {"name": "thread 8 (pt_gloo_runloop)"}},
        x("user_annotation", "gloo:all_reduce", -50, 60, tid=8),  # launched before the trace began
        x("user_annotation", "ProfilerStep#5", 0, 1000),
        x("cpu_op", "c10d::recv_", 10, 20, **{"Sequence number": 64, "Concrete Inputs": peer}),
        x("user_annotation", "gloo:recv", 25, 175),  # waits until 200
        x("cpu_op", "c10d::send", 300, 10, **{"Concrete Inputs": peer}),
        x("user_annotation", "gloo:send", 305, 2),  # a lone send: buffered, no wait
        x("cpu_op", "c10d::send", 400, 10, **{"Concrete Inputs": peer}),  # a batched pair:
        x("user_annotation", "gloo:send", 405, 95),
        x("cpu_op", "c10d::recv_", 412, 10, **{"Concrete Inputs": peer}),
        x("user_annotation", "gloo:recv", 415, 90),
        x("cpu_op", "c10d::allreduce_", 600, 30, **{"Sequence number": 9}),
        x("cpu_op", "c10d::allreduce_", 640, 10),
        x("user_annotation", "gloo:all_reduce", 620, 280, tid=7),  # waits until 900
        x("user_annotation", "gloo:all_reduce", 650, 260, tid=8),  # until 910
        x("cpu_op", "c10d::broadcast_", 950, 5),  # no annotation
    ]}  # fmt: skip


DP_PGS = [
    {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]},
    {"pg_name": "1", "pg_desc": "DATA_PARALLEL_GROUP_GLOO", "ranks": [0, 1]},
    {"pg_name": "2", "pg_desc": "DATA_PARALLEL_GROUP", "ranks": [1, 0]},
    {"pg_name": "3", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [0]},
    {"pg_name": "4", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [1]},
]


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_gloo_ops_are_communication_lasting_until_their_wait_ended(tmp_path: Path, seed: int | None) -> None:
    paths = []
    for r in range(2):
        doc = gloo_rank(r, DP_PGS)
        if seed is not None:  # events in any order in the file
            random.Random(seed).shuffle(doc["traceEvents"])
        paths.append(tmp_path / f"rank{r}.pt.trace.json")
        paths[-1].write_bytes(orjson.dumps(doc))
    got = [r for r in rows(list(read_trace_files(paths, job="g")))["op"] if r["rank"] == 0]
    spans = [(r["op"], r["p2p"], r["peer"], r["blocking"], round(r["duration"] * 1e6), r["group"], r["seq"])
             for r in got]  # fmt: skip
    assert spans == [
        ("recv", "recv", 1, True, 190, "", -1),  # 10 .. 200: until gloo:recv ended
        ("send", "send", 1, False, 10, "", -1),
        ("sendrecv", "sendrecv", 1, True, 105, "", -1),  # a batched pair: one span, 400 .. 505 (the later wait)
        ("allreduce", "", -1, False, 300, "pg2", 5_000_000),  # autograd's Sequence number is not its seq
        ("allreduce", "", -1, False, 270, "pg2", 5_000_001),
        ("broadcast", "", -1, False, 5, "", -1),  # not a data-parallel collective: no barrier
    ]  # fmt: skip
    assert {r["op_class"] for r in got} == {"comm"}  # the gloo annotations themselves are no spans
    assert {(r["pp"], r["dp"]) for r in got} == {(0, 1)}  # index in its groups' ranks; the _GLOO twin ignored


def test_gloo_traces_without_layout_groups_have_no_coordinates(tmp_path: Path) -> None:
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(orjson.dumps(gloo_rank(0, [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]}])))
    got = rows(list(read_trace_files([path])))["op"]
    assert all("pp" not in r and "dp" not in r for r in got)
    assert [r["group"] for r in got if r["op"] == "allreduce"] == ["", ""]  # comm, but joins no barrier


def test_profiler_cycles_of_one_rank_are_merged(tmp_path: Path) -> None:
    paths = [tmp_path / "rank0.1.pt.trace.json", tmp_path / "rank0.2.pt.trace.json"]
    paths[0].write_bytes(orjson.dumps(rank_trace(0, 1, range(3, 5))))
    paths[1].write_bytes(orjson.dumps(rank_trace(0, 1, range(9, 11))))
    got = rows(list(read_trace_files(paths)))
    assert sorted({r["step"] for r in got["op"]}) == [3, 4, 9, 10] == sorted(r["step"] for r in got["step"])
    paths[1].write_bytes(orjson.dumps(rank_trace(0, 1, range(4, 6))))
    with pytest.raises(FormatError, match="both trace step 4 of rank 0"):
        list(read_trace_files(paths))
