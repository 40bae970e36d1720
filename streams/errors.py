"""One exception root. Each docstring says what the operator should do."""


class DriftlogError(Exception):
    """Base of every error driftlog raises on purpose; the CLI prints it as one line and exits 1."""


class ConfigError(DriftlogError):
    """A setting or option is wrong: fix the named setting (see the settings table in README.md)."""


class BrokerError(DriftlogError):
    """Kafka could not be reached or started: check KAFKA_BOOTSTRAP_SERVERS, or `driftlog kafka status`."""


class LauncherError(BrokerError):
    """The local broker could not be fetched or started: check Java 17+ and Maven (`mvn -v`) and the log named."""


class StoreError(DriftlogError):
    """The audit store refused an operation: read the message; the DuckDB file itself is left unchanged."""


class QueryError(DriftlogError):
    """A SQL query failed or is not allowed: fix the statement (only read-only SELECT-style queries run)."""


class OffsetsMismatch(StoreError):
    """The store holds offsets the audit topic cannot continue (recreated or truncated): the sink refuses to run
    rather than skip records. Recovery: see README.md, "When the audit topic was recreated"."""
