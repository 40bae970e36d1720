-- name: step_time
-- answers: How long did a job's steps take per roll-up window (mean, median, p99, fastest and slowest step)?
-- param: job VARCHAR  job id
SELECT window_start, window_end, n AS steps, mean AS mean_step_s, p50 AS p50_step_s, p99 AS p99_step_s,
       min AS min_step_s, max AS max_step_s
FROM metrics_rollup
WHERE job = $job AND name = 'step_s' AND entity = 'job:' || $job
ORDER BY window_start
