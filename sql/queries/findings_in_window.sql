-- name: findings_in_window
-- answers: Which degradations began in a time window, worst first?
-- param: start DOUBLE  event time (s since epoch) the window starts, inclusive
-- param: end DOUBLE  event time (s since epoch) the window ends, exclusive
SELECT id, kind, subjects, start_time, end_time, severity,
       CAST(cost->>'accel_s' AS DOUBLE) AS cost_accel_s, cost
FROM findings
WHERE start_time >= $start AND start_time < $end
ORDER BY severity DESC, start_time, id
