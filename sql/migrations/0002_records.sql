-- 0002: the records derived from the audit log. Each is an append-only <name>_log with one row per audit
-- record (a worker re-delivery repeats a row, same id) and a view <name> with the first row per id in
-- audit-log order. audit/derived.py says which JSON field fills which column. Times are event time,
-- seconds since the epoch.

-- Findings: something degraded.
CREATE TABLE findings_log (
    id               VARCHAR NOT NULL,    -- content-derived finding id
    kind             VARCHAR NOT NULL,    -- step_time_drift | straggler | straggler_cascade | sync_loss | ...
    subjects         VARCHAR[] NOT NULL,  -- operator-graph element ids, e.g. job:<id>, rank:<job>/<r>
    start_time       DOUBLE  NOT NULL,    -- when the degradation began
    end_time         DOUBLE  NOT NULL,    -- last evidence at detection
    severity         DOUBLE  NOT NULL,    -- e.g. observed / baseline step time
    evidence         JSON    NOT NULL,
    cost             JSON    NOT NULL,    -- unit -> estimate, e.g. {"accel_s": 812.5}
    source_topic     VARCHAR NOT NULL,    -- input position the finding was emitted at
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL,
    audit_partition  INTEGER NOT NULL,    -- the audit record it came from
    audit_offset     BIGINT  NOT NULL
);

-- Rejected input, one row per (input message, reason). The original bytes are on the dead-letter topic.
CREATE TABLE dead_letters_log (
    id               VARCHAR NOT NULL,
    reason           VARCHAR NOT NULL,    -- see docs/contract.md: malformed_json, wrong_type, duplicate, late, ...
    detail           VARCHAR NOT NULL,    -- the first rejected sample's precise reason
    sample_count     INTEGER NOT NULL,    -- samples rejected for this reason (1 for a whole message)
    sample_indices   INTEGER[] NOT NULL,  -- their positions in the message (first 1000; empty for a whole message)
    whole_message    BOOLEAN NOT NULL,    -- true when the message as a whole was refused
    original_sha256  VARCHAR NOT NULL,    -- of the original bytes
    original_bytes   BIGINT  NOT NULL,
    source_topic     VARCHAR NOT NULL,    -- input position of the refused message
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL,
    audit_partition  INTEGER NOT NULL,
    audit_offset     BIGINT  NOT NULL
);

-- Control decisions: what the scheduler, autoscaler, retry logic, runtime, power manager and policy gates did.
CREATE TABLE decisions_log (
    id                 VARCHAR NOT NULL,  -- the producer's decision id
    time               DOUBLE  NOT NULL,
    controller         VARCHAR NOT NULL,  -- e.g. hpa/router, power-manager/rack7
    layer              VARCHAR NOT NULL,  -- scheduler | orchestrator | autoscaler | runtime | retry | model | policy | power | other
    action             VARCHAR NOT NULL,  -- e.g. scale_out, power_cap, preempt, retry
    targets            VARCHAR[] NOT NULL, -- operator-graph element ids acted on
    parameters         JSON    NOT NULL,
    reason             VARCHAR NOT NULL,
    expected_metric    VARCHAR,           -- expected effect: which metric ...
    expected_direction VARCHAR,           -- ... and which way (up | down | none)
    job                VARCHAR NOT NULL,  -- '' when not job-specific
    source_topic       VARCHAR NOT NULL,
    source_partition   INTEGER NOT NULL,
    source_offset      BIGINT  NOT NULL,
    audit_partition    INTEGER NOT NULL,
    audit_offset       BIGINT  NOT NULL
);

-- A ranked cause of a finding: an operator-graph element or a control decision, with its share of the cost.
CREATE TABLE attributions_log (
    id               VARCHAR NOT NULL,
    finding_id       VARCHAR NOT NULL,  -- findings.id
    rank             INTEGER NOT NULL,  -- 1 = most likely cause
    cause_kind       VARCHAR NOT NULL,  -- element | decision
    cause            VARCHAR NOT NULL,  -- element id (rank:job/3, stage:job/2, link:a-b, ...) or decision id
    share            DOUBLE  NOT NULL,  -- share of the finding's cost attributed to this cause (0..1)
    slowdown         DOUBLE,            -- actual / counterfactual step time with this cause healed
    cost_accel_s     DOUBLE,            -- accelerator-seconds attributed
    evidence         JSON    NOT NULL,
    source_topic     VARCHAR NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL,
    audit_partition  INTEGER NOT NULL,
    audit_offset     BIGINT  NOT NULL
);

-- The operator graph of a job as it changed (a snapshot only when it changed).
CREATE TABLE graph_snapshots_log (
    id               VARCHAR NOT NULL,
    job              VARCHAR NOT NULL,
    valid_from       DOUBLE  NOT NULL,  -- from when this graph holds
    digest           VARCHAR NOT NULL,  -- content hash of nodes + edges
    nodes            JSON    NOT NULL,  -- [{"id", "kind", ...attributes}]
    edges            JSON    NOT NULL,  -- [{"src", "dst", "kind"}]
    source_topic     VARCHAR NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL,
    audit_partition  INTEGER NOT NULL,
    audit_offset     BIGINT  NOT NULL
);

-- Windowed roll-ups of the key series per job and entity (step time, cost per output, wasted accelerator-s by cause, ...).
CREATE TABLE metrics_rollup_log (
    id               VARCHAR NOT NULL,
    job              VARCHAR NOT NULL,
    entity           VARCHAR NOT NULL,  -- element id the series belongs to (job:x, or cause:straggler_wait ...)
    name             VARCHAR NOT NULL,  -- e.g. step_s, accel_s_per_output, power_w, wasted_accel_s
    window_start     DOUBLE  NOT NULL,
    window_end       DOUBLE  NOT NULL,
    n                BIGINT  NOT NULL,
    mean             DOUBLE,
    p50              DOUBLE,
    p99              DOUBLE,
    min              DOUBLE,
    max              DOUBLE,
    total            DOUBLE,            -- sum over the window (for additive series such as wasted_accel_s)
    source_topic     VARCHAR NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL,
    audit_partition  INTEGER NOT NULL,
    audit_offset     BIGINT  NOT NULL
);

CREATE VIEW findings AS SELECT * EXCLUDE (audit_partition, audit_offset) FROM findings_log
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY audit_partition, audit_offset) = 1;
CREATE VIEW dead_letters AS SELECT * EXCLUDE (audit_partition, audit_offset) FROM dead_letters_log
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY audit_partition, audit_offset) = 1;
CREATE VIEW decisions AS SELECT * EXCLUDE (audit_partition, audit_offset) FROM decisions_log
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY audit_partition, audit_offset) = 1;
CREATE VIEW attributions AS SELECT * EXCLUDE (audit_partition, audit_offset) FROM attributions_log
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY audit_partition, audit_offset) = 1;
CREATE VIEW graph_snapshots AS SELECT * EXCLUDE (audit_partition, audit_offset) FROM graph_snapshots_log
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY audit_partition, audit_offset) = 1;
CREATE VIEW metrics_rollup AS SELECT * EXCLUDE (audit_partition, audit_offset) FROM metrics_rollup_log
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY audit_partition, audit_offset) = 1;
