-- 0001: the raw audit log and the sink's consumed offsets with the hash-chain heads.

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

-- Next offset to consume per audit-topic partition and the hash chain's head there, written in the same
-- transaction as the rows (the only table that is updated in place).
CREATE TABLE sink_offsets (
    topic       VARCHAR NOT NULL,
    "partition" INTEGER NOT NULL,
    next_offset BIGINT  NOT NULL,
    chain_head  BLOB    NOT NULL,  -- chain_hash of the record at next_offset - 1
    PRIMARY KEY (topic, "partition")
);
