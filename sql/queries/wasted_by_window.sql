-- name: wasted_by_window
-- answers: How many accelerator-seconds did a job waste in each roll-up window, by cause (straggler waits, exposed communication, pipeline bubbles, re-runs)?
-- param: job VARCHAR  job id
SELECT window_start, window_end, replace(entity, 'cause:', '') AS cause, sum(total) AS wasted_accel_s
FROM metrics_rollup
WHERE job = $job AND name = 'wasted_accel_s'
GROUP BY ALL
ORDER BY window_start, cause
