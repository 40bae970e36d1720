from pathlib import Path

import pytest
from pydantic import ValidationError

from streams.config import Settings, env_names, load, to_env


def test_environment_is_read_with_prefix_and_kafka_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker-1:9092,broker-2:9092")
    monkeypatch.setenv("DRIFTLOG_DB_PATH", "/data/a.duckdb")
    monkeypatch.setenv("DRIFTLOG_TOPIC_PARTITIONS", "8")
    s = load()
    assert s.kafka_bootstrap_servers == "broker-1:9092,broker-2:9092"
    assert s.db_path == Path("/data/a.duckdb")
    assert s.topic_partitions == 8


def test_overrides_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "env:1")
    assert load(kafka_bootstrap_servers="cli:2").kafka_bootstrap_servers == "cli:2"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DRIFTLOG_TOPIC_PARTITIONS", "0"),
        ("DRIFTLOG_LOG_LEVEL", "loud"),
        ("DRIFTLOG_SINK_HTTP_PORT", "70000"),
    ],
)
def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        load()


def test_settings_are_frozen() -> None:
    s = load()
    with pytest.raises(ValidationError):
        s.topic_partitions = 3  # type: ignore[misc]


def test_to_env_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    original = load(kafka_bootstrap_servers="x:1", db_path=Path("/tmp/z.duckdb"), topic_partitions=3)
    for key, value in to_env(original).items():
        monkeypatch.setenv(key, value)
    assert load() == original


def test_every_field_has_an_env_name_and_a_description() -> None:
    names = env_names()
    assert len(names) == len(Settings.model_fields)
    assert all(desc for desc in names.values())
    assert "KAFKA_BOOTSTRAP_SERVERS" in names
