"""docker/compose.yaml and docker/Dockerfile stay in step with the code.

The worker and sink containers may only set environment variables that ``streams.config`` really reads
(a misspelt name is silently ignored by pydantic-settings, so the container would run on a default);
the image's entry point, exposed ports and state directory must match the settings' defaults.
No Docker engine is needed: the files are parsed, not built.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from streams.cli import cli
from streams.config import Settings, env_names

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DRIFTLOG_SERVICES = ("worker", "sink")


# --- compose.yaml ---------------------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "compose.yaml is not a mapping"
    return data


def _service(name: str) -> dict[str, Any]:
    services = _compose().get("services") or {}
    assert name in services, f"compose.yaml has no service {name!r}"
    service = services[name]
    assert isinstance(service, dict)
    return service


def _environment(service: dict[str, Any]) -> dict[str, str | None]:
    """A service's ``environment`` as a mapping; handles both the list and the mapping form.

    ``None`` is a variable passed through from the host (``- NAME`` or ``NAME:`` with no value).
    """
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return {str(k): None if v is None else _scalar(v) for k, v in env.items()}
    assert isinstance(env, list), f"environment must be a list or a mapping, not {type(env).__name__}"
    out: dict[str, str | None] = {}
    for item in env:
        name, sep, value = str(item).partition("=")
        out[name] = value if sep else None
    return out


def _scalar(value: object) -> str:
    # Compose turns YAML booleans into "true"/"false", not Python's "True"/"False".
    return str(value).lower() if isinstance(value, bool) else str(value)


def _container_ports(service: dict[str, Any]) -> set[int]:
    ports: set[int] = set()
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            # [HOST_IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]
            ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    return ports


def _volume_targets(service: dict[str, Any]) -> set[str]:
    targets: set[str] = set()
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            targets.add(str(entry["target"]))
        else:
            parts = str(entry).split(":")
            targets.add(parts[1] if len(parts) > 1 else parts[0])
    return targets


@pytest.mark.parametrize("name", DRIFTLOG_SERVICES)
def test_driftlog_services_set_only_real_settings(name: str) -> None:
    env = _environment(_service(name))
    assert env, f"service {name!r} sets no environment"
    unknown = sorted(set(env) - set(env_names()))
    assert not unknown, f"service {name!r} sets variables driftlog never reads: {unknown}"


@pytest.mark.parametrize("name", DRIFTLOG_SERVICES)
def test_driftlog_services_reach_kafka_and_publish_health(name: str) -> None:
    env = _environment(_service(name))
    assert env.get("KAFKA_BOOTSTRAP_SERVERS") == "kafka:9092"
    # The default 127.0.0.1 would make the published health/metrics port unreachable from the host.
    assert env.get("DRIFTLOG_HTTP_HOST") == "0.0.0.0"


def test_worker_and_sink_agree_on_topics_and_broker() -> None:
    worker, sink = (_environment(_service(n)) for n in DRIFTLOG_SERVICES)
    shared = ["KAFKA_BOOTSTRAP_SERVERS", "DRIFTLOG_AUDIT_TOPIC", "DRIFTLOG_TOPIC_PARTITIONS"]
    for name in shared:
        assert worker.get(name) == sink.get(name), f"worker and sink disagree on {name}"


def test_services_run_the_matching_command_and_port() -> None:
    defaults = {
        "worker": Settings.model_fields["worker_http_port"].default,
        "sink": Settings.model_fields["sink_http_port"].default,
    }
    for name, port in defaults.items():
        service = _service(name)
        command = service.get("command")
        argv = shlex.split(command) if isinstance(command, str) else list(command or [])
        assert argv == [name], f"service {name!r} must run `driftlog {name}`, not {argv}"
        assert name in cli.commands, f"`driftlog {name}` is not a CLI command"
        assert port in _container_ports(service), f"service {name!r} does not publish port {port}"


@pytest.mark.parametrize("name", DRIFTLOG_SERVICES)
def test_driftlog_services_wait_for_a_healthy_broker(name: str) -> None:
    depends = _service(name).get("depends_on")
    assert isinstance(depends, dict) and "kafka" in depends, f"service {name!r} must depend on kafka"
    assert depends["kafka"].get("condition") == "service_healthy"
    test = _service("kafka").get("healthcheck", {}).get("test")
    assert test, "the kafka service needs a healthcheck for condition: service_healthy"
    assert "kafka-broker-api-versions.sh" in " ".join(test if isinstance(test, list) else [test])


def test_sink_keeps_its_duckdb_file_on_a_volume() -> None:
    sink = _service("sink")
    db_path = PurePosixPath(str(_environment(sink)["DRIFTLOG_DB_PATH"]))
    assert db_path.is_absolute()
    assert any(db_path.is_relative_to(t) for t in _volume_targets(sink)), (
        f"{db_path} is not on a volume of the sink: {sorted(_volume_targets(sink))}"
    )


def test_kafka_is_apache_kafka_39_without_topic_auto_creation() -> None:
    kafka = _service("kafka")
    assert str(kafka.get("image", "")).startswith("apache/kafka:3.9")
    env = _environment(kafka)
    # driftlog creates its topics explicitly (with the configured partition count).
    assert env.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "false"
    assert env.get("KAFKA_PROCESS_ROLES") == "broker,controller"


@pytest.mark.parametrize("name", DRIFTLOG_SERVICES)
def test_settings_load_from_the_compose_environment(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in env_names():  # start from nothing but the compose environment
        monkeypatch.delenv(var, raising=False)
    env = _environment(_service(name))
    for var, value in env.items():
        assert value is not None, f"{var} is passed through from the host; give it a value"
        monkeypatch.setenv(var, value)

    settings = Settings()

    assert settings.kafka_bootstrap_servers == "kafka:9092"
    assert settings.http_host == "0.0.0.0"
    assert settings.db_path == Path(str(env["DRIFTLOG_DB_PATH"]))
    assert settings.topic_partitions >= 1
    # Every variable the service sets really changed the corresponding setting.
    values = settings.model_dump()
    by_env = dict(zip(env_names(), Settings.model_fields, strict=True))
    for var, value in env.items():
        assert str(values[by_env[var]]) == value, f"{var}={value!r} was not applied"


# --- Dockerfile -----------------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends in a continuation line"
    return out


def _args(keyword: str) -> list[str]:
    return [args for kw, args in _instructions() if kw == keyword]


def _exec_form(keyword: str) -> list[str]:
    found = _args(keyword)
    assert found, f"Dockerfile has no {keyword}"
    value = json.loads(found[-1])  # the last one wins; exec (JSON) form is required for signals
    assert isinstance(value, list)
    return [str(v) for v in value]


def _dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in _args("ENV"):
        for token in shlex.split(args):
            name, sep, value = token.partition("=")
            assert sep, f"use ENV NAME=value, not the legacy form: {args!r}"
            env[name] = value
    return env


def test_dockerfile_runs_driftlog_worker_by_default() -> None:
    assert _exec_form("ENTRYPOINT") == ["driftlog"]
    assert _exec_form("CMD") == ["worker"]


def test_dockerfile_exposes_the_default_health_ports() -> None:
    exposed = {int(p.split("/")[0]) for args in _args("EXPOSE") for p in args.split()}
    expected = {
        Settings.model_fields["worker_http_port"].default,
        Settings.model_fields["sink_http_port"].default,
    }
    assert exposed == expected


def test_dockerfile_builds_on_python_311_slim_and_installs_the_package() -> None:
    bases = {args.split()[0] for args in _args("FROM")}
    assert len(bases) == 1 and next(iter(bases)).startswith("python:3.11.")  # one pinned patch release
    assert "slim" in next(iter(bases))
    assert any("pip install" in args and "/app" in args for args in _args("RUN"))


def test_dockerfile_builds_the_native_core_and_installs_it() -> None:
    stages = [args.split() for args in _args("FROM")]
    assert stages[0][1:] == ["AS", "native"] and len(stages[-1]) == 1  # the final stage is the runtime image
    assert any("maturin build" in args and "native/Cargo.toml" in args for args in _args("RUN"))
    assert any("--from=native" in args for args in _args("COPY"))
    assert any("pip install" in args and "/wheels/" in args for args in _args("RUN"))


def test_dockerfile_runs_as_non_root() -> None:
    users = _args("USER")
    assert users, "Dockerfile never switches away from root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


def test_dockerfile_env_uses_real_settings_and_keeps_state_on_a_volume() -> None:
    env = _dockerfile_env()
    ours = {k for k in env if k.startswith(("DRIFTLOG_", "KAFKA_"))}
    assert ours, "Dockerfile sets no driftlog settings"
    assert ours <= set(env_names()), f"unknown settings in Dockerfile ENV: {sorted(ours - set(env_names()))}"
    volumes: list[str] = []
    for args in _args("VOLUME"):
        volumes += json.loads(args) if args.startswith("[") else args.split()
    home = PurePosixPath(env["DRIFTLOG_HOME"])
    db_path = PurePosixPath(env["DRIFTLOG_DB_PATH"])
    assert str(home) in volumes
    assert db_path.is_relative_to(home)


def _images() -> list[str]:
    """Every image the build or compose pulls: FROM lines, COPY --from=image, compose ``image:``."""
    images = [args.split()[0] for args in _args("FROM")]
    images += [a.split("=", 1)[1] for args in _args("COPY") for a in args.split() if a.startswith("--from=")]
    images = [i for i in images if i != "native"]  # the build stage, not an image
    images += [s["image"] for n, s in _compose()["services"].items() if n not in DRIFTLOG_SERVICES]
    return images


def test_every_base_image_is_pinned_to_an_exact_release() -> None:
    for image in _images():
        _name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{image} is not pinned"
        version = tag.split("-", 1)[0]
        assert version.count(".") == 2, f"{image}: pin a full version (x.y.z), not {version!r}"


def test_the_build_context_leaves_out_git_and_local_state() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git/", ".venv/", "*.duckdb", "*.pem"):
        assert entry in ignored, f".dockerignore must leave out {entry}"


@pytest.mark.parametrize("name", [*DRIFTLOG_SERVICES, "kafka"])
def test_ports_are_published_on_loopback_only(name: str) -> None:
    for entry in _service(name).get("ports") or []:
        assert str(entry).startswith("127.0.0.1:"), f"{name} publishes {entry} beyond loopback"


@pytest.mark.parametrize(("name", "setting"), [("worker", "worker_http_port"), ("sink", "sink_http_port")])
def test_healthchecks_probe_the_configured_port(name: str, setting: str) -> None:
    test = _service(name)["healthcheck"]["test"]
    script = " ".join(test)
    env = next(e for e, _ in env_names().items() if e == f"DRIFTLOG_{setting.upper()}")
    default = Settings.model_fields[setting].default
    assert f"$${{{env}:-{default}}}/health" in script, script


def test_readme_says_the_sql_token_is_required_for_docker() -> None:
    readme = (ROOT / "README.md").read_text()
    docker = readme[readme.index("With Docker") :][:800]
    assert "DRIFTLOG_SQL_TOKEN" in docker and "required" in docker
