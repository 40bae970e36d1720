-- name: job_coherence_timeline
-- answers: Per time bucket, how coherent was the control of one job: of the decisions that touched it (those job_decisions lists), how many were in a conflict pair (two controllers acting on the same element within window_s), and the coherent share?
-- param: job VARCHAR  job id
-- param: bucket_s DOUBLE  bucket length, seconds
-- param: window_s DOUBLE  how close in time two decisions must be to conflict, seconds
WITH graph AS (
    SELECT DISTINCT unnest(json_transform(nodes, '[{"id": "VARCHAR"}]')).id AS element
    FROM graph_snapshots
    WHERE job = $job
),
mine AS (
    SELECT d.id, d.time, d.controller, d.targets
    FROM decisions AS d
    WHERE d.job = $job
       OR len(list_filter(d.targets, lambda t: t = 'job:' || $job OR contains(t, ':' || $job || '/'))) > 0
       OR EXISTS (SELECT 1 FROM graph AS g WHERE list_contains(d.targets, g.element))
),
conflicted AS (
    SELECT DISTINCT unnest([a.id, b.id]) AS id
    FROM mine AS a
    JOIN mine AS b
      ON a.controller <> b.controller AND b.time >= a.time AND b.time - a.time <= $window_s
     AND (b.time > a.time OR a.id < b.id)
     AND len(list_intersect(a.targets, b.targets)) > 0
)
SELECT floor(m.time / $bucket_s) * $bucket_s AS bucket_start, count(*) AS decisions,
       count(c.id) AS in_conflict, 1 - count(c.id) / count(*) AS coherence
FROM mine AS m LEFT JOIN conflicted AS c USING (id)
GROUP BY ALL
ORDER BY bucket_start
