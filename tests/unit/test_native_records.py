"""The native core changes no record: a scenario's audit records with it equal, body for body, those of the
Python definitions it replaces (``DRIFTLOG_NATIVE=0``, read at import, hence child processes for both)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import require_native

CHILD = """
import hashlib, json, sys
import orjson
from streams.sim.scenarios import SCENARIOS
from streams.testing import run_stream
name, seed, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out = run_stream([(k, v) for k, _, v in SCENARIOS[name](seed, ranks, steps).run()])
keys = [f"{r.type} {r.id}" for r in out.audit]
assert len(set(keys)) == len(keys), "a record emitted twice"
print(json.dumps({f"{r.type} {r.id}": hashlib.sha256(orjson.dumps(r.body, option=orjson.OPT_SORT_KEYS)).hexdigest()
                  for r in out.audit}))
"""


def records(native: bool, *scenario: str) -> dict[str, str]:
    env = {**os.environ, "DRIFTLOG_NATIVE": "1" if native else "0"}
    done = subprocess.run([sys.executable, "-c", CHILD, *scenario], env=env, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "scenario",
    [
        ("training-slow-link", "1", "16", "60"),  # ideal: every step traced, carried on the job's timeline
        ("realistic-slow-rank-and-link", "2", "32", "100"),  # sampled steps, float32 times, jitter, blocking p2p
        ("serving-saturation", "1", "16", "100"),  # decisions, serving series, early warning
    ],
)
def test_the_native_core_gives_the_records_of_the_definitions(scenario: tuple[str, ...]) -> None:
    require_native()
    native = records(True, *scenario)
    assert native, "the scenario emitted no records: nothing is compared"
    assert records(False, *scenario) == native
