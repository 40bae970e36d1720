-- 0001: the raw audit log, the records derived from it, and the sink's consumed offsets.

-- Every audit record exactly as it was consumed from the audit topic (one row per Kafka record).
CREATE TABLE audit_log (
    topic        VARCHAR   NOT NULL,  -- audit topic the record was read from
    "partition"  INTEGER   NOT NULL,
    "offset"     BIGINT    NOT NULL,
    kafka_ts_ms  BIGINT    NOT NULL,  -- Kafka record timestamp (ms since epoch)
    key          BLOB,
    value        BLOB      NOT NULL,  -- the audit record JSON, byte for byte
    record_type  VARCHAR   NOT NULL,  -- finding | dead_letter | ...
    record_id    VARCHAR   NOT NULL,  -- content-derived id (repeats when the worker re-delivers)
    chain_hash   BLOB      NOT NULL,  -- SHA-256 hash chain per (topic, partition), see audit/chain.py
    written_at   TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);

-- Findings: something degraded. One row per finding id (re-deliveries of the same id are ignored).
CREATE TABLE findings (
    id               VARCHAR PRIMARY KEY,
    kind             VARCHAR NOT NULL,  -- e.g. step_time_drift
    subjects         VARCHAR[] NOT NULL,  -- operator-graph element ids, e.g. job:<id>
    start_time       DOUBLE  NOT NULL,  -- event time (s) the degradation began
    end_time         DOUBLE  NOT NULL,  -- event time (s) of the last evidence at detection
    severity         DOUBLE  NOT NULL,  -- e.g. observed / baseline step time
    evidence         JSON    NOT NULL,
    cost             JSON    NOT NULL,  -- unit -> estimate, e.g. {"extra_step_seconds": 12.5}
    source_topic     VARCHAR NOT NULL,  -- input position the finding was emitted at
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL
);

-- Rejected input, one row per (input message, reason). The original bytes are on the dead-letter topic.
CREATE TABLE dead_letters (
    id               VARCHAR PRIMARY KEY,
    reason           VARCHAR NOT NULL,  -- malformed_json | unknown_schema | missing_field | wrong_type | not_finite
                                        -- | out_of_range | unknown_kind | bad_columns | oversized | duplicate | late ...
    detail           VARCHAR NOT NULL,  -- the first rejected sample's precise reason
    sample_count     INTEGER NOT NULL,  -- samples rejected for this reason (1 for a whole message)
    sample_indices   INTEGER[] NOT NULL, -- their positions in the message (first 1000; empty for a whole message)
    whole_message    BOOLEAN NOT NULL,  -- true when the message as a whole was refused
    original_sha256  VARCHAR NOT NULL,  -- of the original bytes (which are on the dead-letter topic)
    original_bytes   BIGINT  NOT NULL,
    source_topic     VARCHAR NOT NULL,  -- input position of the refused message
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL
);

-- Next offset to consume per audit-topic partition and the hash chain's head there, written in the same
-- transaction as the rows (the only table that is updated in place).
CREATE TABLE sink_offsets (
    topic       VARCHAR NOT NULL,
    "partition" INTEGER NOT NULL,
    next_offset BIGINT  NOT NULL,
    chain_head  BLOB    NOT NULL,  -- chain_hash of the record at next_offset - 1
    PRIMARY KEY (topic, "partition")
);
