"""What ``analyze`` and ``replay`` share: settings from ``--set``, a progress line, and writing a run's records
into an audit DB of its own (hash-chained, with a signed checkpoint and the run's settings, so that
``driftlog verify`` and every query work on it as on the sink's DB)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from audit.records import AuditRecord
from streams.config import Settings, env_names
from streams.errors import ConfigError

RUN_TOPIC = "driftlog.run"


def with_overrides(settings: Settings, pairs: tuple[str, ...]) -> Settings:
    """``--set NAME=VALUE`` (NAME: a setting's field or environment name, e.g. step_drift_threshold or
    DRIFTLOG_STEP_DRIFT_THRESHOLD), validated like the environment."""
    by_env = {env: field for field, env in zip(Settings.model_fields, env_names(), strict=True)}
    update: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        field = by_env.get(name.strip(), name.strip().lower())
        if not sep or field not in Settings.model_fields:
            raise ConfigError(f"--set {pair!r}: expected SETTING=VALUE with a setting of README.md's table")
        update[field] = value
    try:
        return Settings.model_validate({**settings.model_dump(), **update})
    except ValueError as exc:
        raise ConfigError(f"--set: {str(exc).splitlines()[-1] if str(exc) else exc}") from exc


def parse_time(text: str, option: str) -> float:
    """Seconds since the epoch from ISO-8601 (``2026-11-23T21:00:00Z``; no zone: UTC) or a number."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"{option} {text!r}: give an ISO-8601 time (2026-11-23T21:00:00Z) or epoch seconds") from exc
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


class ProgressLine:
    """One self-overwriting line on stderr: share done, rate and time left (only on a terminal, and at most
    every 0.5 s); ``done()`` ends it."""

    def __init__(self, what: str, enabled: bool | None = None) -> None:
        self.what = what
        self.start = self.last = time.monotonic()
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def __call__(self, done: float, total: float, unit: str = "B") -> None:  # the Progress callback
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.5:
            return
        self.last = now
        share = min(1.0, done / total) if total else 0.0
        rate = done / max(1e-9, now - self.start)
        eta = (total - done) / rate if rate > 0 else float("inf")
        sys.stderr.write(f"\r{self.what}: {share:6.1%}  {_human(rate)}{unit}/s  ETA {eta:5.0f} s ")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _human(x: float) -> str:
    for unit in ("", "k", "M", "G"):
        if abs(x) < 1000:
            return f"{x:.1f} {unit}"
        x /= 1000
    return f"{x:.1f} T"


def write_run(
    db: Path, records: list[AuditRecord], command: str, inputs: Any, settings: Settings, sign: bool = True
) -> dict[str, Any]:
    """Write the run's records to a new audit DB at ``db`` (refused if it already holds records), record the
    run and sign a checkpoint of the chain heads. Returns what was recorded about the run."""
    from audit.checkpoint import Signer, append_line
    from audit.duckdb_store import DuckDBStore
    from streams.analyze import store_records

    settings = settings.model_copy(update={"db_path": db})  # its key and checkpoint file beside it by default
    store = DuckDBStore(db)
    try:
        if store.next_offsets():
            raise ConfigError(f"{db} already holds audit records: give --db a new file (a run writes its own DB)")
        written = store_records(records, store, RUN_TOPIC)
        heads = store.heads()
        if sign and heads:
            line = Signer.load_or_create(settings.signing_key_path).checkpoint(1, heads)
            append_line(settings.checkpoint_path, line)
            store.add_checkpoint(1, line)
        run = {
            "command": command,
            "inputs": inputs,
            "settings": orjson.loads(settings.model_dump_json()),
            "records": written,
            "heads": {f"{t}/{p}": h.hex() for (t, p), (_, h) in sorted(heads.items())},
        }
        store.con.execute(
            "INSERT INTO runs (command, inputs, settings, records, heads) VALUES (?, ?, ?, ?, ?)",
            [command, orjson.dumps(inputs).decode(), orjson.dumps(run["settings"]).decode(), written,
             orjson.dumps(run["heads"]).decode()],
        )  # fmt: skip
        return run
    finally:
        store.close()
