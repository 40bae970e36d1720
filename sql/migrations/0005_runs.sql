-- 0005: offline runs. `driftlog analyze` and `driftlog replay` write their records into an audit DB of their
-- own; each run is recorded here with what it read and the settings it ran with, so that a post-mortem
-- states how its findings were obtained. command: analyze | replay; inputs: the files, or the topics with
-- the time range and the offsets read; settings: every setting's value (JSON object); records: how many
-- audit records the run wrote; heads: the chain heads after the run (topic/partition -> hex).
CREATE TABLE IF NOT EXISTS runs (
    command VARCHAR NOT NULL,
    inputs JSON NOT NULL,
    settings JSON NOT NULL,
    records BIGINT NOT NULL,
    heads JSON NOT NULL,
    recorded_at TIMESTAMPTZ DEFAULT current_timestamp
);
