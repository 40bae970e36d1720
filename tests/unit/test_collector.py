"""The cyclic garbage collector held off while a job's graph is built (streams/engine/collector.py): at 16k
ranks each 25 % growth of the heap set off a full collection while networkx built a dict per node and edge."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from audit.records import SourcePosition
from streams.contract.admission import Admission
from streams.engine import collector
from streams.engine.engine import Engine
from streams.engine.opgraph import OperatorGraph
from streams.pipeline import Processor
from streams.sim.scenarios import SCENARIOS


@pytest.fixture
def enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_holds_the_collector_off_and_leaves_it_as_it_was(enabled: None) -> None:
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():  # nested: the outer block still holds it off after the inner one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector.paused():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()  # (disabled before: not turned on by the block)


def test_a_jobs_graph_and_its_snapshots_are_built_with_the_collector_held_off(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[bool]] = {}
    for name in ("add_relations", "add_ranks", "snapshot"):
        method = getattr(OperatorGraph, name)

        def spy(self: OperatorGraph, *args: object, _name: str = name, _method: object = method) -> object:
            on = gc.isenabled()
            out = _method(self, *args)  # type: ignore[operator]
            # (a decision's snapshot, of a controller's few edges, is taken as it comes)
            if _name != "snapshot" or sum(len(p.nodes) for p in out) >= 16:
                seen.setdefault(_name, []).append(on)
            return out

        monkeypatch.setattr(OperatorGraph, name, spy)
    processor = Processor(Engine(), Admission(allowed_lateness=30))
    processor.declare([SourcePosition("telemetry", 0, 0)])
    for offset, (kind, _, value) in enumerate(SCENARIOS["training-fabric"](1, 16, 2).run()):
        source = SourcePosition(kind, 0, offset)
        processor.telemetry(value, source) if kind == "telemetry" else processor.decision(value, source)
    processor.drain()
    processor.flush(SourcePosition("telemetry", 0, 0))
    assert seen["add_relations"] and seen["add_ranks"] and seen["snapshot"]
    assert not any(on for calls in seen.values() for on in calls)
    assert gc.isenabled()
