"""A broker for the live benchmarks: KAFKA_BOOTSTRAP_SERVERS if set, else the project's launcher. The topics
a benchmark creates are deleted when it is done: a broker that keeps every run's topics ends up with tens of
thousands of partitions to load at each start (27 GB in 78,000 partition directories once, which no longer
came up within 90 s)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from streams.config import Settings, load
from streams.demo import namespaced
from streams.kafka.admin import delete_topics, list_topics
from streams.kafka.launcher import LocalKafka


@contextlib.contextmanager
def bench_settings(**overrides: object) -> Iterator[Settings]:
    """Fresh topics, groups and DuckDB file on a real broker, for one benchmark run; its topics (every one
    named under its prefix, those derived from its names too) and its work directory deleted at the end."""
    base = load()
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    if not bootstrap:
        broker = LocalKafka(base.kafka_home, base.kafka_version, name="bench")
        bootstrap = broker.start().bootstrap
    work = Path(tempfile.mkdtemp(prefix="driftlog-bench-"))
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        cfg = namespaced(
            base.model_copy(update={"kafka_bootstrap_servers": bootstrap, "home": work / "home", **overrides}),
            prefix,
            work / "audit.duckdb",
        )
        yield cfg
    finally:
        drop_topics(bootstrap, lambda name: name.startswith(f"{prefix}."))
        shutil.rmtree(work, ignore_errors=True)
        if broker is not None:
            broker.stop()


def drop_topics(bootstrap: str, owned: Callable[[str], bool]) -> list[str]:
    """Delete the topics whose names are ``owned``; returns them. A broker that cannot be reached, or a topic it
    did not delete, is reported on stderr, not raised: the benchmark's own outcome (or error) is what its
    caller needs."""
    try:
        return asyncio.run(_drop(bootstrap, owned))
    except Exception as exc:
        print(f"could not delete the benchmark's topics: {exc!r}", file=sys.stderr)
        return []


async def _drop(bootstrap: str, owned: Callable[[str], bool]) -> list[str]:
    names = sorted(n for n in await list_topics(bootstrap) if owned(n))
    failed = await delete_topics(bootstrap, names) if names else {}
    if failed:
        print(f"the broker did not delete {len(failed)} of the benchmark's topics: {failed}", file=sys.stderr)
    return names


def broker_pid(bootstrap: str) -> int | None:
    """The process of the local broker (``driftlog kafka start``) at ``bootstrap``, if this machine runs it."""
    base = load()
    for broker in LocalKafka.running(base.kafka_home, base.kafka_version):
        state = broker.state()
        if state is not None and state.bootstrap == bootstrap:
            return state.pid
    return None
