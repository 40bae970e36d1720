-- name: blocking_slowdown
-- answers: How much longer did a job's steps take than its structural baseline (the ideal step from peers), per window: the blocking slowdown T(actual)/T(ideal) and its worst step, beside the accelerator-seconds view (allocated over those left when no rank waits for a late peer, and over the compute alone)?
-- param: job VARCHAR  job id
WITH w AS (
    SELECT window_start, window_end,
           sum(n) FILTER (WHERE name = 'step_ideal_s') AS steps,
           sum(total) FILTER (WHERE name = 'step_ideal_s') AS ideal,
           sum(total) FILTER (WHERE name = 'step_modelled_s') AS modelled,
           max(max) FILTER (WHERE name = 'blocking_slowdown') AS worst_step,
           sum(total) FILTER (WHERE name = 'allocated_accel_s') AS allocated,
           sum(total) FILTER (WHERE name = 'compute_accel_s') AS compute,
           sum(total) FILTER (WHERE name = 'wasted_accel_s' AND entity = 'cause:straggler_wait') AS straggler_wait
    FROM metrics_rollup
    WHERE job = $job AND name IN ('step_ideal_s', 'step_modelled_s', 'blocking_slowdown', 'allocated_accel_s',
                                  'compute_accel_s', 'wasted_accel_s')
    GROUP BY window_start, window_end
)
SELECT window_start, window_end, steps, ideal / nullif(steps, 0) AS mean_ideal_step_s,
       modelled / nullif(ideal, 0) AS blocking_slowdown, worst_step AS worst_step_slowdown,
       allocated AS allocated_accel_s, straggler_wait AS straggler_wait_accel_s,
       allocated / nullif(allocated - coalesce(straggler_wait, 0), 0) AS wait_slowdown,
       allocated / nullif(compute, 0) AS slowdown_over_compute
FROM w
WHERE ideal > 0 OR allocated > 0
ORDER BY window_start
