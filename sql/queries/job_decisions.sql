-- name: job_decisions
-- answers: Which control decisions touched a job in a time window: those its producer tagged with the job, and those acting on the job, one of its elements, or an element its operator graph has held (a node it ran on, a service it serves, a rack)?
-- param: job VARCHAR  job id
-- param: start DOUBLE  event time (s since epoch) the window starts, inclusive
-- param: end DOUBLE  event time (s since epoch) the window ends, exclusive
WITH graph AS (
    SELECT DISTINCT unnest(json_transform(nodes, '[{"id": "VARCHAR"}]')).id AS element
    FROM graph_snapshots
    WHERE job = $job
)
SELECT d.id, d.time, d.controller, d.layer, d.action, d.targets, d.reason, d.expected_metric,
       d.expected_direction, d.job
FROM decisions AS d
WHERE d.time >= $start AND d.time < $end
  AND (d.job = $job
       OR len(list_filter(d.targets, lambda t: t = 'job:' || $job OR contains(t, ':' || $job || '/'))) > 0
       OR EXISTS (SELECT 1 FROM graph AS g WHERE list_contains(d.targets, g.element)))
ORDER BY d.time, d.id
