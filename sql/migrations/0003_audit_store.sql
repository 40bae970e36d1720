-- 0003: the engine's structural records, signed checkpoints, and append-only guards.

-- A ranked cause of a finding: an operator-graph element or a control decision, with its share of the cost.
CREATE TABLE attributions (
    id               VARCHAR PRIMARY KEY,
    finding_id       VARCHAR NOT NULL,  -- findings.id
    rank             INTEGER NOT NULL,  -- 1 = most likely cause
    cause_kind       VARCHAR NOT NULL,  -- element | decision
    cause            VARCHAR NOT NULL,  -- element id (rank:job/3, stage:job/2, link:a-b, optype:job/allreduce) or decision id
    share            DOUBLE  NOT NULL,  -- share of the finding's cost attributed to this cause (0..1)
    slowdown         DOUBLE,            -- actual / counterfactual step time with this cause healed
    cost_accel_s     DOUBLE,            -- accelerator-seconds attributed
    evidence         JSON    NOT NULL,
    source_topic     VARCHAR NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL
);

-- The operator graph of a job as it changed (a snapshot only when it changed).
CREATE TABLE graph_snapshots (
    id               VARCHAR PRIMARY KEY,
    job              VARCHAR NOT NULL,
    valid_from       DOUBLE  NOT NULL,  -- event time (s) from which this graph holds
    digest           VARCHAR NOT NULL,  -- content hash of nodes + edges
    nodes            JSON    NOT NULL,  -- [{"id", "kind", ...attributes}]
    edges            JSON    NOT NULL,  -- [{"src", "dst", "kind"}]
    source_topic     VARCHAR NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL
);

-- Windowed roll-ups of the key series per job and entity (step time, cost per output, power, ...).
CREATE TABLE metrics_rollup (
    id               VARCHAR PRIMARY KEY,
    job              VARCHAR NOT NULL,
    entity           VARCHAR NOT NULL,  -- element id the series belongs to (job:x for job-level series)
    name             VARCHAR NOT NULL,  -- e.g. step_s, accel_s_per_output, power_w, wasted_accel_s
    window_start     DOUBLE  NOT NULL,  -- event time (s)
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
    source_offset    BIGINT  NOT NULL
);

-- Signed checkpoints of the chain heads, as the sink wrote them (the same lines go to the checkpoint file
-- and the checkpoints topic, outside this file; verification trusts those copies, not this table).
CREATE TABLE checkpoints (
    seq         BIGINT  PRIMARY KEY,
    payload     VARCHAR NOT NULL,  -- the exact signed JSON (heads, time, key id)
    signature   VARCHAR NOT NULL,  -- Ed25519 signature of payload, hex
    key_id      VARCHAR NOT NULL   -- SHA-256 prefix of the public key
);

-- Append-only: refuse UPDATE and DELETE. Guards can be dropped by whoever holds the file; the hash chain
-- and the signed checkpoints are what prove nothing changed (`driftlog verify`).
CREATE TABLE _append_only_guard (refused INTEGER);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('audit_log is append-only');
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('audit_log is append-only');
CREATE TRIGGER findings_no_update BEFORE UPDATE ON findings FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('findings is append-only');
CREATE TRIGGER findings_no_delete BEFORE DELETE ON findings FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('findings is append-only');
CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('decisions is append-only');
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('decisions is append-only');
CREATE TRIGGER dead_letters_no_update BEFORE UPDATE ON dead_letters FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('dead_letters is append-only');
CREATE TRIGGER dead_letters_no_delete BEFORE DELETE ON dead_letters FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('dead_letters is append-only');
CREATE TRIGGER attributions_no_update BEFORE UPDATE ON attributions FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('attributions is append-only');
CREATE TRIGGER attributions_no_delete BEFORE DELETE ON attributions FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('attributions is append-only');
CREATE TRIGGER graph_snapshots_no_update BEFORE UPDATE ON graph_snapshots FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('graph_snapshots is append-only');
CREATE TRIGGER graph_snapshots_no_delete BEFORE DELETE ON graph_snapshots FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('graph_snapshots is append-only');
CREATE TRIGGER metrics_rollup_no_update BEFORE UPDATE ON metrics_rollup FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('metrics_rollup is append-only');
CREATE TRIGGER metrics_rollup_no_delete BEFORE DELETE ON metrics_rollup FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('metrics_rollup is append-only');
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('checkpoints is append-only');
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints FOR EACH STATEMENT INSERT INTO _append_only_guard SELECT error('checkpoints is append-only');
