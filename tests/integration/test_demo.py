"""`driftlog demo` end to end on the test broker: the story names the element, the decision and the cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.config import load
from streams.demo import run_demo

pytestmark = pytest.mark.integration


def test_demo_tells_the_story(kafka_bootstrap: str, tmp_path: Path) -> None:
    lines: list[str] = []
    settings = load(kafka_bootstrap_servers=kafka_bootstrap, home=tmp_path / "home")
    run_demo(settings, tmp_path / "demo.duckdb", lines.append)
    story = "\n".join(lines)
    assert "hash chains intact" in story
    assert "what degraded: job:llm-pretrain step time rose" in story
    assert "which element: rank:llm-pretrain/52 — healing it alone" in story
    assert "the straggler: rank:llm-pretrain/52 on node:n6" in story
    assert "the cascade: it holds up 63 ranks" in story
    assert "which decision: power-manager/rack0 did power_cap on node:n6" in story
    assert "through rank:llm-pretrain/52" in story
    assert "what it cost: accelerator-seconds per token" in story
    assert "where the accelerator-seconds went to waste: " in story
    assert "dead-lettered: 1 × malformed_json" in story
