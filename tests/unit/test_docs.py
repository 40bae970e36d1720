"""The README stays complete: every setting, every command, every make target it names."""

import re
from pathlib import Path

import click
import pytest

from streams.cli import cli
from streams.config import env_names

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def settings_table() -> dict[str, str]:
    rows = re.findall(r"^\| `([A-Z_]+)` \| [^|]+ \| (.+) \|$", README, flags=re.M)
    return dict(rows)


def test_every_setting_is_documented_with_its_description() -> None:
    assert settings_table() == env_names()


def command_paths(group: click.Group, prefix: str = "driftlog") -> list[str]:
    paths = []
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            paths.extend(command_paths(command, path))
        else:
            paths.append(path)
    return paths


def test_every_cli_command_is_in_the_readme() -> None:
    paths = command_paths(cli)
    assert len(paths) >= 8
    missing = [p for p in paths if f"`{p}`" not in README]
    assert missing == []


@pytest.mark.parametrize("target", sorted(set(re.findall(r"`make ([a-z.-]+)`", README))))
def test_every_make_target_in_the_readme_exists(target: str) -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), target


def test_quick_start_is_the_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert re.findall(r"^make \w+", quick, flags=re.M) == ["make demo", "make test"]
