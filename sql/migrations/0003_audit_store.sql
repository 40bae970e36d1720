-- 0003: signed checkpoints, and append-only guards.

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
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('audit_log is append-only');
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('audit_log is append-only');
CREATE TRIGGER findings_log_no_update BEFORE UPDATE ON findings_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('findings_log is append-only');
CREATE TRIGGER findings_log_no_delete BEFORE DELETE ON findings_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('findings_log is append-only');
CREATE TRIGGER dead_letters_log_no_update BEFORE UPDATE ON dead_letters_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('dead_letters_log is append-only');
CREATE TRIGGER dead_letters_log_no_delete BEFORE DELETE ON dead_letters_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('dead_letters_log is append-only');
CREATE TRIGGER decisions_log_no_update BEFORE UPDATE ON decisions_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('decisions_log is append-only');
CREATE TRIGGER decisions_log_no_delete BEFORE DELETE ON decisions_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('decisions_log is append-only');
CREATE TRIGGER attributions_log_no_update BEFORE UPDATE ON attributions_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('attributions_log is append-only');
CREATE TRIGGER attributions_log_no_delete BEFORE DELETE ON attributions_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('attributions_log is append-only');
CREATE TRIGGER graph_snapshots_log_no_update BEFORE UPDATE ON graph_snapshots_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('graph_snapshots_log is append-only');
CREATE TRIGGER graph_snapshots_log_no_delete BEFORE DELETE ON graph_snapshots_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('graph_snapshots_log is append-only');
CREATE TRIGGER metrics_rollup_log_no_update BEFORE UPDATE ON metrics_rollup_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('metrics_rollup_log is append-only');
CREATE TRIGGER metrics_rollup_log_no_delete BEFORE DELETE ON metrics_rollup_log FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('metrics_rollup_log is append-only');
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('checkpoints is append-only');
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('checkpoints is append-only');
