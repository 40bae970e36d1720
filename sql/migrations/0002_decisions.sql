-- 0002: control decisions (what the scheduler, autoscaler, retry logic, runtime, power manager and policy
-- gates did), one row per decision id, as the decisions topic delivered them.

CREATE TABLE decisions (
    id               VARCHAR PRIMARY KEY,  -- the producer's decision id
    time             DOUBLE  NOT NULL,     -- event time (s since epoch) of the decision
    controller       VARCHAR NOT NULL,     -- e.g. hpa/router, power-manager/rack7
    layer            VARCHAR NOT NULL,     -- scheduler | orchestrator | autoscaler | runtime | retry | model | policy | power | other
    action           VARCHAR NOT NULL,     -- e.g. scale_out, power_cap, preempt, retry
    targets          VARCHAR[] NOT NULL,   -- operator-graph element ids acted on
    parameters       JSON    NOT NULL,
    reason           VARCHAR NOT NULL,
    expected_metric  VARCHAR,              -- expected effect: which metric ...
    expected_direction VARCHAR,            -- ... and which way (up | down | none)
    job              VARCHAR NOT NULL,     -- '' when not job-specific
    source_topic     VARCHAR NOT NULL,     -- where it was read
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT  NOT NULL
);
