"""A broker for the live benchmarks: KAFKA_BOOTSTRAP_SERVERS if set, else the project's launcher."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from streams.config import Settings, load
from streams.demo import namespaced
from streams.kafka.launcher import LocalKafka


@contextlib.contextmanager
def bench_settings(**overrides: object) -> Iterator[Settings]:
    """Fresh topics, groups and DuckDB file on a real broker, for one benchmark run."""
    base = load()
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    if not bootstrap:
        broker = LocalKafka(base.kafka_home, base.kafka_version, name="bench")
        bootstrap = broker.start().bootstrap
    work = Path(tempfile.mkdtemp(prefix="driftlog-bench-"))
    try:
        cfg = namespaced(
            base.model_copy(update={"kafka_bootstrap_servers": bootstrap, "home": work / "home", **overrides}),
            f"bench-{uuid.uuid4().hex[:8]}",
            work / "audit.duckdb",
        )
        yield cfg
    finally:
        if broker is not None:
            broker.stop()
