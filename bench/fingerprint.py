"""The records of every simulator scenario, hashed: a change meant to be faster, smaller or tidier must leave
them identical. ``fingerprint.py OUT.json`` writes one hash per record (type, id → SHA-256 of its sorted-key
body) for each scenario and seed; ``--against BASE.json`` then prints ``identical`` or what differs and exits 1.
The committed ``bench/fingerprint.json`` is main's; a change that means to alter records rewrites it in the
same commit and says why."""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import orjson

from streams.sim.scenarios import SCENARIOS
from streams.testing import run_stream

RANKS = {"training-sync-loss": 32, "control-storm": 32, "control-storm-healthy": 32}
STEPS = {"serving-saturation": 100, "serving-saturation-healthy": 100}
SEEDS = (1, 2)
LARGE = (3, 64, 120)  # one more seed of each scenario at 64 ranks x 120 steps
COMMITTED = Path(__file__).with_name("fingerprint.json")

Fingerprint = dict[str, dict[str, str]]


def run_of(name: str, seed: int, ranks: int, steps: int) -> dict[str, str]:
    items = [(kind, value) for kind, _, value in SCENARIOS[name](seed, ranks, steps).run()]
    out = run_stream(items)
    hashes: dict[str, str] = {}
    for r in out.audit:
        body = orjson.dumps(r.body, option=orjson.OPT_SORT_KEYS)
        hashes[f"{r.type} {r.id}"] = hashlib.sha256(body).hexdigest()[:16]
    hashes["dead letters"] = str(len(out.dead_letters))
    return hashes


def fingerprint() -> Fingerprint:
    runs: Fingerprint = {}
    for name in SCENARIOS:
        sizes = [(seed, RANKS.get(name, 16), STEPS.get(name, 60)) for seed in SEEDS] + [LARGE]
        for seed, ranks, steps in sizes:
            started = time.perf_counter()
            run = f"{name} seed {seed} {ranks}x{steps}"
            runs[run] = run_of(name, seed, ranks, steps)
            print(f"{run}: {len(runs[run]) - 1} records, {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return runs


def differences(new: Fingerprint, base: Fingerprint) -> list[str]:
    lines = []
    for run in sorted(set(new) | set(base)):
        a, b = new.get(run, {}), base.get(run, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                lines.append(f"{run}: {key}: {b.get(key, 'absent')} -> {a.get(key, 'absent')}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="where to write this tree's fingerprint (JSON)")
    parser.add_argument("--against", type=Path, default=COMMITTED, help="compare with this one (default: %(default)s)")
    args = parser.parse_args()
    base = orjson.loads(args.against.read_bytes()) if args.against.exists() else None
    runs = fingerprint()
    args.out.write_bytes(orjson.dumps(runs, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
    records = sum(len(r) - 1 for r in runs.values())
    if base is None:
        print(f"{len(runs)} runs, {records} records; no {args.against} to compare with")
        return 0
    diff = differences(runs, base)
    print(f"{len(runs)} runs, {records} records: " + ("identical" if not diff else f"{len(diff)} differ"))
    for line in diff[:40]:
        print(line)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
