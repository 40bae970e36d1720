-- 0007: roll-ups of per-step values (step_s; step_ideal_s, step_modelled_s, blocking_slowdown) carry them
-- one by one: points = [[step, step start, value], ...] in the window, so a step-by-step series can be read
-- (sql/queries/step_series.sql). NULL for other roll-ups and for records written before this migration.
CREATE OR REPLACE VIEW metrics_rollup AS
SELECT s['id'] AS id,
       s['body']['job'] AS job,
       s['body']['entity'] AS entity,
       s['body']['name'] AS name,
       s['body']['window_start'] AS window_start,
       s['body']['window_end'] AS window_end,
       s['body']['n'] AS n,
       s['body']['mean'] AS mean,
       s['body']."p50" AS p50,
       s['body']."p99" AS p99,
       s['body']['min'] AS min,
       s['body']['max'] AS max,
       s['body']['total'] AS total,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset,
       s['body']['points'] AS points
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"job": "VARCHAR", "entity": "VARCHAR", "name": "VARCHAR", "window_start": "DOUBLE", "window_end": "DOUBLE", "n": "BIGINT", "mean": "DOUBLE", "p50": "DOUBLE", "p99": "DOUBLE", "min": "DOUBLE", "max": "DOUBLE", "total": "DOUBLE", "points": [["DOUBLE"]]}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'metrics_rollup')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;
