"""One live worker's tasks without Kafka, against the in-process engine, in CPU time: what running the engine
as one task per telemetry partition costs by itself, apart from Faust, Kafka and the machine's load.

    .venv/bin/python bench/bench_tasks.py [--partitions 4] [--mark-every 200] [--repeats 3] [--profile FILE]

The suite's workload (``bench/suite.py``'s FULL_JOBS) goes through ``streams.testing.run_stream`` (one
processor, as the suite's in-process figure) and, in turn, through ``--partitions`` :class:`WorkerState` tasks
set up as the worker sets them up (:meth:`WorkerState.configure`: decision shares, control-plane owner,
forwarding): each telemetry message to the task of its key's partition (Kafka's default partitioner), each
decision to every task, the job-less samples a task forwards to every other task, and every ``--mark-every``
messages each task's mark (:meth:`WorkerState.mark`) to the others, as its commits would carry it. A channel
is caught up once everything produced to it so far was read (messages are read as they are produced); at the
end each task ticks with a zero idle flush, as the worker does once its input is idle. Prints both CPU
medians, their ratio, and whether the tasks' records are the in-process ones.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.partitioner import murmur2

from audit.records import SourcePosition
from streams.pipeline import Output, Processor
from streams.testing import run_stream
from streams.variants import without_job
from streams.worker_state import WorkerState

INPUTS = {"telemetry": "telemetry", "decisions": "decisions", "shared": "shared"}  # (topic -> kind)
Item = tuple[str, str, bytes]  # (telemetry | decisions, key, value)


class Tasks:
    """``partitions`` tasks of one worker over in-memory topics: ``produced`` counts each partition's messages."""

    def __init__(self, partitions: int) -> None:
        self.produced: Counter[tuple[str, int]] = Counter()
        everything = [(topic, p) for topic in INPUTS for p in range(partitions)]
        self.tasks = [WorkerState(p, Processor(), cast(Any, None), self.highwater, 0.0) for p in range(partitions)]
        for task in self.tasks:
            task.configure(INPUTS, everything)

    def highwater(self, topic: str, partition: int) -> int:
        return self.produced[(topic, partition)]

    def produce(self, topic: str, partition: int) -> SourcePosition:
        position = SourcePosition(topic, partition, self.produced[(topic, partition)])
        self.produced[(topic, partition)] += 1
        return position

    def share(self, task: WorkerState, value: bytes, out: list[Output]) -> None:
        """A message of ``task``'s shared partition, read by every other task."""
        position = self.produce("shared", task.partition)
        out.extend(t.process("shared", value, position) for t in self.tasks if t is not task)

    def telemetry(self, partition: int, value: bytes, out: list[Output]) -> None:
        task = self.tasks[partition]
        got = task.process("telemetry", value, self.produce("telemetry", partition))
        out.append(got)
        for forwarded in got.forward:
            self.share(task, forwarded, out)

    def decision(self, partition: int, value: bytes, out: list[Output]) -> None:
        position = self.produce("decisions", partition)
        out.extend(t.process("decisions", value, position) for t in self.tasks)

    def marks(self, out: list[Output]) -> None:
        for task in self.tasks:
            mark = task.mark()
            if mark != task.marked:  # (a commit carries a mark only when it changed)
                task.marked = mark
                self.share(task, mark.encode(), out)

    def end(self, out: list[Output]) -> None:
        self.marks(out)
        for task in self.tasks:
            tick = task.tick()
            assert tick is not None, f"task {task.partition} is not caught up at the end"
            out.append(tick)


def through_tasks(items: list[Item], partitions: int, mark_every: int) -> list[Output]:
    tasks, out = Tasks(partitions), list[Output]()
    for n, (kind, key, value) in enumerate(items, 1):
        partition = (murmur2(key.encode()) & 0x7FFFFFFF) % partitions
        if kind == "telemetry":
            tasks.telemetry(partition, value, out)
        else:
            tasks.decision(partition, value, out)
        if n % mark_every == 0:
            tasks.marks(out)
    tasks.end(out)
    return out


def records(outputs: list[Output]) -> Counter[tuple[str, str]]:
    return Counter((r.type, r.id) for o in outputs for r in o.audit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--mark-every", type=int, default=200, help="messages between the tasks' marks")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="write a cProfile of one run through the tasks here")
    parser.add_argument("--without-job", action="store_true", help="power and fabric topology samples of no job "
                        "(streams.variants.without_job): every task reads them")  # fmt: skip
    args = parser.parse_args()
    from bench.suite import FULL_JOBS, Workload

    items = Workload.of(FULL_JOBS).items
    if args.without_job:  # (an exporter's message of no job goes with the key of the message it came from)
        items = [(k, key, v) for kind, key, raw in items for k, v in without_job([(kind, raw)])]
    expected = records([run_stream([(k, v) for k, _, v in items])])
    got = records(through_tasks(items, args.partitions, args.mark_every))
    print(f"{len(items):,} messages; records {'identical' if got == expected else 'DIFFER'} ({sum(got.values())} "
          f"through the tasks, {sum(expected.values())} in process)")  # fmt: skip
    if args.profile is not None:
        import cProfile

        cProfile.runctx("through_tasks(items, args.partitions, args.mark_every)", globals(), locals(),
                        str(args.profile))  # fmt: skip
    cpu: dict[str, list[float]] = {"in-process": [], "tasks": []}
    for _ in range(args.repeats):  # in turn: the machine's load changes
        started = time.process_time()
        run_stream([(k, v) for k, _, v in items])
        cpu["in-process"].append(time.process_time() - started)
        started = time.process_time()
        through_tasks(items, args.partitions, args.mark_every)
        cpu["tasks"].append(time.process_time() - started)
    for name, runs in cpu.items():
        print(f"{name:10s} CPU s median {statistics.median(runs):.3f}  runs {' '.join(f'{r:.3f}' for r in runs)}")
    print(f"tasks / in-process: {statistics.median(cpu['tasks']) / statistics.median(cpu['in-process']):.3f}")


if __name__ == "__main__":
    main()
