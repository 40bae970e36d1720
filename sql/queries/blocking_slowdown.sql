-- name: blocking_slowdown
-- answers: How much longer did a job's steps take than its structural baseline, per window: allocated accelerator-seconds over those left when no rank waits for a late peer (straggler waits), and over the compute alone (every wait removed)?
-- param: job VARCHAR  job id
WITH w AS (
    SELECT window_start, window_end,
           sum(total) FILTER (WHERE name = 'allocated_accel_s') AS allocated,
           sum(total) FILTER (WHERE name = 'compute_accel_s') AS compute,
           sum(total) FILTER (WHERE name = 'wasted_accel_s' AND entity = 'cause:straggler_wait') AS straggler_wait
    FROM metrics_rollup
    WHERE job = $job AND name IN ('allocated_accel_s', 'compute_accel_s', 'wasted_accel_s')
    GROUP BY window_start, window_end
)
SELECT window_start, window_end, allocated AS allocated_accel_s, straggler_wait AS straggler_wait_accel_s,
       allocated / nullif(allocated - coalesce(straggler_wait, 0), 0) AS blocking_slowdown,
       allocated / nullif(compute, 0) AS slowdown_over_compute
FROM w
WHERE allocated > 0
ORDER BY window_start
