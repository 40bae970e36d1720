-- name: wasted_by_cause
-- answers: How many accelerator-seconds were wasted, by cause (straggler waits, pipeline bubbles, exposed communication, retries), per job and day?
-- param: job VARCHAR  job id, or '%' for every job
SELECT job, CAST(to_timestamp(window_start) AS DATE) AS day, entity AS cause,
       sum(total) AS wasted_accel_s
FROM metrics_rollup
WHERE name = 'wasted_accel_s' AND job LIKE $job
GROUP BY ALL
ORDER BY job, day, wasted_accel_s DESC, cause
