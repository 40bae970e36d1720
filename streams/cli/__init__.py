"""The ``driftlog`` command line (see :mod:`streams.cli.root`)."""

from streams.cli import audit, data, engine, report, services, sim  # noqa: F401 - importing registers the commands
from streams.cli.root import cli, main, with_broker

__all__ = ["cli", "main", "with_broker"]
