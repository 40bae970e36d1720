-- name: cost_per_output
-- answers: How did a job's cost per output unit (accelerator-seconds per token/sample/request) evolve, against its healthy baseline?
-- param: job VARCHAR  job id
SELECT window_start, window_end, mean AS accel_s_per_output,
       mean / first_value(mean) OVER (ORDER BY window_start) AS vs_first_window, n AS steps
FROM metrics_rollup
WHERE job = $job AND name = 'accel_s_per_output'
ORDER BY window_start
