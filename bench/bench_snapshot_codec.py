"""What a worker snapshot costs to encode at a large rank count, and zlib level 1 against zstd level 1 on it.

    .venv/bin/python bench/bench_snapshot_codec.py [--ranks 64 768] [--steps 40] [--repeat 7]

Per rank count, the simulator's training-fabric job (``--steps`` steps) goes through one processor with the
lower-latency profile (lateness 0.75 s, epoch 0.1 s); then, medians of ``--repeat`` runs: the whole
:meth:`Snapshot.encode`, :meth:`Snapshot.pickled` (copy and pickle) alone (what the worker's event loop spends
and its snapshot guard times; the compression runs on a thread), and each codec on the same pickled state
(compress ms, MB, decompress ms), side by side in one run. A loaded machine: run it twice, compare ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.records import SourcePosition
from streams.config import load
from streams.durable import Snapshot
from streams.pipeline import Processor, build_processor
from streams.sim.scenarios import SCENARIOS

CODECS: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    "zlib-1": (lambda b: zlib.compress(b, 1), zlib.decompress),
    "zstd-1": (zstandard.ZstdCompressor(level=1).compress, zstandard.ZstdDecompressor().decompress),
}


def loaded(ranks: int, steps: int) -> Processor:
    cfg = load().model_copy(update={"allowed_lateness_s": 0.75, "epoch_s": 0.1})
    processor = build_processor(cfg)
    processor.declare([SourcePosition("telemetry", 0, 0)])
    for i, (kind, _, value) in enumerate(SCENARIOS["training-fabric"](1, ranks, steps).run()):
        at = SourcePosition("telemetry", 0, i)
        processor.telemetry(value, at) if kind == "telemetry" else processor.decision(value, at)
    return processor


def median_ms(repeat: int, f: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 768])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    for ranks in args.ranks:
        processor = loaded(ranks, args.steps)
        encode_ms, parts = median_ms(args.repeat, Snapshot(1, processor, {}).encode)
        loop_ms, raw = median_ms(args.repeat, Snapshot(1, processor, {}).pickled)
        print(f"{ranks} ranks: Snapshot.encode {encode_ms:.0f} ms, {sum(map(len, parts)) / 1e6:.2f} MB in "
              f"{len(parts)} parts; of it on the event loop (Snapshot.pickled) {loop_ms:.0f} ms, "
              f"{len(raw) / 1e6:.1f} MB")  # fmt: skip
        for name, (compress, decompress) in CODECS.items():
            c_ms, body = median_ms(args.repeat, compress, raw)
            d_ms, back = median_ms(args.repeat, decompress, body)
            assert back == raw
            print(f"  {name}: compress {c_ms:6.1f} ms, {len(body) / 1e6:5.2f} MB; decompress {d_ms:5.1f} ms")


if __name__ == "__main__":
    main()
