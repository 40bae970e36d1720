-- name: output_economics
-- answers: What did one unit of a job's output (token, sample, request) cost per window: accelerator-seconds, money (with a price set) and energy (with power samples), each also as a ratio to the first window?
-- param: job VARCHAR  job id
WITH w AS (
    SELECT window_start, window_end,
           max(mean) FILTER (WHERE name = 'accel_s_per_output') AS accel_s_per_output,
           max(mean) FILTER (WHERE name = 'cost_per_output') AS cost_per_output,
           max(mean) FILTER (WHERE name = 'energy_j_per_output') AS energy_j_per_output
    FROM metrics_rollup
    WHERE job = $job AND entity = 'job:' || $job
      AND name IN ('accel_s_per_output', 'cost_per_output', 'energy_j_per_output')
    GROUP BY window_start, window_end
)
SELECT window_start, window_end, accel_s_per_output, cost_per_output, energy_j_per_output,
       accel_s_per_output / first_value(accel_s_per_output) OVER (ORDER BY window_start) AS accel_s_vs_first,
       energy_j_per_output / first_value(energy_j_per_output) OVER (ORDER BY window_start) AS energy_vs_first
FROM w
ORDER BY window_start
