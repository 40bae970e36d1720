"""Settings: one frozen, validated object; the environment is read here and nowhere else.

Every field documents itself (its ``description``); ``README.md`` carries the same table and
``tests/unit/test_docs.py`` keeps the two in step, as it does for ``docker/compose.yaml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path.home() / ".cache" / "driftlog"


class Settings(BaseSettings):
    """Everything driftlog reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="DRIFTLOG_", frozen=True, extra="ignore", populate_by_name=True)

    kafka_bootstrap_servers: str = Field(
        "",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS"),
        description="Kafka bootstrap servers (host:port,...). Empty: use the local broker that "
        "`driftlog kafka start` runs.",
    )
    home: Path = Field(
        DEFAULT_HOME,
        description="Directory outside the repository for the Kafka jars, the local broker's data and worker state.",
    )
    kafka_version: str = Field("3.9.1", description="Apache Kafka version the local launcher fetches with Maven.")
    telemetry_topic: str = Field("driftlog.telemetry", description="Topic of telemetry envelopes (input).")
    decisions_topic: str = Field("driftlog.decisions", description="Topic of control decisions (input).")
    audit_topic: str = Field("driftlog.audit", description="Topic of audit records (worker output, sink input).")
    dead_letter_topic: str = Field(
        "driftlog.dead-letter", description="Topic of rejected input, with the original bytes and the reason."
    )
    checkpoint_topic: str = Field(
        "driftlog.checkpoints", description="Topic where the sink publishes signed checkpoints of the chain heads."
    )
    topic_partitions: int = Field(4, ge=1, le=1024, description="Partitions for topics driftlog creates.")
    worker_group: str = Field("driftlog-worker", description="Faust application id (the worker's consumer group).")
    sink_group: str = Field("driftlog-sink", description="Consumer group of the audit sink (monitoring only).")
    db_path: Path = Field(Path("driftlog.duckdb"), description="DuckDB file the audit sink writes.")
    checkpoint_file: Path | None = Field(
        None, description="File the sink appends signed checkpoints to (default: the DuckDB path + .checkpoints.jsonl)."
    )
    checkpoint_interval_s: float = Field(
        10.0, gt=0, description="Seconds between signed checkpoints while records arrive."
    )
    signing_key: Path | None = Field(
        None,
        description="Ed25519 private key (PEM) that signs checkpoints; created if missing "
        "(default: the DuckDB path + .signing.pem, i.e. owned by the deployment; see README, signing key).",
    )
    sink_batch_max: int = Field(
        122_880,
        ge=1,
        description="Most audit records the sink writes in one transaction (122,880 = one DuckDB row group: "
        "a full batch is written straight to the data file, not twice via the WAL).",
    )
    sink_batch_wait_ms: int = Field(
        200,
        ge=1,
        description="Longest a consumed record waits for its batch to fill, ms (a sink that has caught up "
        "with the topic commits at once).",
    )
    http_host: str = Field("127.0.0.1", description="Address the health/metrics endpoints bind to.")
    worker_http_port: int = Field(6066, ge=0, le=65535, description="Worker health/metrics port (0: any free port).")
    sink_http_port: int = Field(6067, ge=0, le=65535, description="Sink health/metrics port (0: any free port).")
    sql_token: str = Field(
        "",
        description="Bearer token the sink's SQL endpoint requires (required when DRIFTLOG_HTTP_HOST is not loopback).",
    )
    query_max_rows: int = Field(100_000, ge=1, description="Most rows one SQL query may return.")
    query_timeout_s: float = Field(10.0, gt=0, description="Longest one SQL query may run before it is stopped, s.")
    query_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Most bytes one SQL result may take on the wire (JSON or Arrow)."
    )
    query_concurrency: int = Field(2, ge=1, le=64, description="SQL queries the sink runs at once (its own threads).")
    query_queue: int = Field(
        8, ge=0, le=1024, description="SQL queries that may wait for a free query thread; beyond that: HTTP 429."
    )
    query_memory_mb: int = Field(512, ge=16, description="Memory one snapshot's queries may use together, MB.")
    http_read_timeout_s: float = Field(5.0, gt=0, description="Longest the sink waits for a request body, s (408).")
    sql_snapshot_interval_s: float = Field(
        0.5,
        gt=0,
        description="Least seconds between the read-only snapshots the sink publishes for SQL (their lag); rows "
        "committed after that long are published at once.",
    )
    checkpoint_public_key: Path | None = Field(
        None,
        description="Pinned public key (PEM) verify checks checkpoint signatures against (not the .pub beside "
        "the private key, which the host could replace).",
    )
    checkpoint_key_fingerprint: str = Field(
        "",
        description="Pinned SHA-256 fingerprint (hex, 16+ digits) of the checkpoint signing key; verify refuses "
        "a key that does not match it.",
    )
    checkpoint_witness: Path | None = Field(
        None,
        description="External witness file (another host's mount) the sink also appends every checkpoint to; "
        "verify compares it.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("warning", description="Log level.")
    log_format: Literal["json", "text"] = Field("json", description="Log line format.")
    allowed_lateness_s: float = Field(
        30.0,
        ge=0,
        le=86_400,
        description="Event-time lateness allowed (s): the watermark trails the input furthest behind by this "
        "much; older samples (behind their source's newest, or behind the watermark) are dead-lettered as late.",
    )
    epoch_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="Event-time epoch (s): input is handed to the engine in epochs of this much event time, each "
        "once the watermark has passed its end; shorter epochs release findings sooner, at more cost per sample.",
    )
    metrics_topic: str = Field(
        "",
        description="Topic an OpenTelemetry Collector's Kafka exporter writes metrics to (read as metric "
        "samples); empty: none.",
    )
    metrics_encoding: Literal["auto", "otlp_json", "otlp_proto"] = Field(
        "auto", description="Encoding of the metrics topic (the exporter's `encoding`); auto: tell by content."
    )
    state_topic: str = Field(
        "driftlog.worker-state",
        description="Compacted topic of the worker's state snapshots (written in the transactions of its output).",
    )
    shared_topic: str = Field(
        "driftlog.shared",
        description="Topic through which the worker's tasks share telemetry samples that name no job (fabric "
        "topology, power and service metrics): each task forwards those it reads, every task reads all.",
    )
    state_interval_s: float = Field(
        2.0,
        gt=0,
        le=3600,
        description="Seconds between worker transactions (audit records + state snapshot); a task that keeps up "
        "with its input commits its records at once.",
    )
    idle_flush_s: float = Field(
        30.0,
        gt=0,
        description="When every input of the worker has been caught up this long (wall clock), it ends its "
        "input as a file's end does: every epoch released, every job closed.",
    )
    job_idle_s: float = Field(
        600.0,
        gt=0,
        description="A job with no samples for this long in event time (s) is closed (its last steps and "
        "windows emitted) and evicted.",
    )
    max_future_s: float = Field(
        3600.0,
        gt=0,
        description="Samples dated more than this (s) after their message's Kafka timestamp are dead-lettered "
        "as future (and do not move their source's newest event time).",
    )
    step_drift_warmup: int = Field(
        20, ge=3, description="Steps per job the step-time detector uses to learn the healthy baseline."
    )
    step_drift_threshold: float = Field(
        0.05,
        gt=0,
        lt=10,
        description="Relative change of step time (up or down) the step-time detector treats as drift.",
    )
    series_every: int = Field(
        4,
        ge=1,
        le=64,
        description="The series-drift detector (utilisation, power, p99, cost and energy per "
        "output) tests each series on every N-th of its samples: its cost per update falls about N-fold, a "
        "change is found up to N-1 samples later.",
    )
    structural_slowdown_threshold: float = Field(
        0.05,
        gt=0,
        lt=10,
        description="Blocking slowdown over the ideal step from peers (T(actual)/T(ideal) - 1) "
        "that makes a step slow for the structural_slowdown detector (a healthy job's jitter stays near 0.01-0.02).",
    )
    price_per_accel_hour: float = Field(
        0.0,
        ge=0,
        le=1e6,
        description="Price of one accelerator-hour (any currency) for the cost_per_output roll-up; 0: none.",
    )
    rollup_window_s: float = Field(
        600.0,
        gt=0,
        le=1e7,
        description="Longest a job's roll-up window lasts in event time (s): a window ends after 50 steps or "
        "this long, whichever comes first (sampled steps: profilers trace every N-th step).",
    )

    kafka_name: str = Field(
        "default",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Name of the local broker (`driftlog kafka start --name`) that commands use when "
        "KAFKA_BOOTSTRAP_SERVERS is empty (when that one does not run and exactly one other does, that one).",
    )
    health_broker_timeout_s: float = Field(
        30.0,
        gt=0,
        description="/health answers 503 once the broker has been unreachable this long, s.",
    )
    health_stall_s: float = Field(
        120.0,
        gt=0,
        description="/health answers 503 when records wait but nothing was committed for this long, s.",
    )

    @property
    def kafka_home(self) -> Path:
        return self.home / "kafka"

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("checkpoint_file", "signing_key", "checkpoint_public_key", "checkpoint_witness", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        return None if value == "" else value

    @property
    def checkpoint_path(self) -> Path:
        return self.checkpoint_file or self.db_path.with_name(self.db_path.name + ".checkpoints.jsonl")

    @property
    def sql_snapshot_dir(self) -> Path:
        return self.db_path.with_name(self.db_path.name + ".sql-snapshot")

    @property
    def signing_key_path(self) -> Path:
        return self.signing_key or self.db_path.with_name(self.db_path.name + ".signing.pem")

    @property
    def all_topics(self) -> tuple[str, ...]:
        return (
            self.telemetry_topic, self.decisions_topic, self.audit_topic, self.dead_letter_topic, self.checkpoint_topic,
            self.shared_topic,
        )  # fmt: skip


def env_names() -> dict[str, str]:
    """Environment variable name → description, for every setting (used by docs and tests)."""
    names: dict[str, str] = {}
    prefix = Settings.model_config.get("env_prefix", "")
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        env = alias.choices[0] if isinstance(alias, AliasChoices) else f"{prefix}{field_name}".upper()
        names[str(env)] = field.description or ""
    return names


def load(**overrides: object) -> Settings:
    """Read the environment once; ``overrides`` (from CLI options) win over it."""
    return Settings(**overrides)  # type: ignore[arg-type]


def to_env(settings: Settings) -> dict[str, str]:
    """The environment that reproduces ``settings`` in a child process."""
    values = settings.model_dump()
    return {
        env: "" if values[name] is None else str(values[name])
        for name, env in zip(Settings.model_fields, env_names(), strict=True)
    }
