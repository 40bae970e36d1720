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
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('checkpoints is append-only');
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints FOR EACH STATEMENT
    INSERT INTO _append_only_guard SELECT error('checkpoints is append-only');
