-- name: step_series
-- answers: What did each of a job's steps take, one row per step: its time as summarised and, where the step
--   was analysed from its spans, as modelled, its ideal from peers and their ratio (blocking slowdown)?
-- param: job VARCHAR  job id
WITH points AS (
    SELECT name, CAST(p[1] AS BIGINT) AS step, p[2] AS step_start, p[3] AS value
    FROM (SELECT name, unnest(points) AS p FROM metrics_rollup
          WHERE job = $job AND entity = 'job:' || $job AND points IS NOT NULL
            AND name IN ('step_s', 'step_modelled_s', 'step_ideal_s', 'blocking_slowdown'))
)
SELECT step,
       min(step_start) AS step_start,
       max(value) FILTER (WHERE name = 'step_s') AS step_s,
       max(value) FILTER (WHERE name = 'step_modelled_s') AS modelled_s,
       max(value) FILTER (WHERE name = 'step_ideal_s') AS ideal_s,
       max(value) FILTER (WHERE name = 'blocking_slowdown') AS blocking_slowdown
FROM points
GROUP BY step
ORDER BY step
