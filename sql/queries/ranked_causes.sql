-- name: ranked_causes
-- answers: For every finding about a job (its job, ranks, stages, ... as subjects) in a time window, what were its ranked causes, their share of its cost, their slowdown both ways (heal only the cause; leave only it unhealed, against the ideal step from peers) and the decision behind each?
-- param: job VARCHAR  job id
-- param: start DOUBLE  event time (s since epoch) the window starts, inclusive
-- param: end DOUBLE  event time (s since epoch) the window ends, exclusive
SELECT f.kind AS finding, f.start_time, f.severity, a.rank, a.cause_kind, a.cause, a.share, a.slowdown,
       a.cost_accel_s, d.controller AS decided_by, d.action AS decision_action, f.id AS finding_id,
       a.slowdown_unhealed
FROM findings AS f
JOIN attributions AS a ON a.finding_id = f.id
LEFT JOIN decisions AS d ON a.cause_kind = 'decision' AND d.id = a.cause
WHERE f.start_time >= $start AND f.start_time < $end
  AND len(list_filter(f.subjects, lambda s: s = 'job:' || $job OR contains(s, ':' || $job || '/'))) > 0
ORDER BY f.start_time, f.id, a.rank
