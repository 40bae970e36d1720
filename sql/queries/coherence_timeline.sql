-- name: coherence_timeline
-- answers: Per time bucket, how coherent was control: decisions taken, decisions in a conflict pair, and the coherent share?
-- param: bucket_s DOUBLE  bucket length, seconds
-- param: window_s DOUBLE  how close in time two decisions must be to conflict, seconds
WITH conflicted AS (
    SELECT DISTINCT unnest([a.id, b.id]) AS id
    FROM decisions AS a
    JOIN decisions AS b
      ON a.controller <> b.controller AND b.time >= a.time AND b.time - a.time <= $window_s
     AND (b.time > a.time OR a.id < b.id)
     AND len(list_intersect(a.targets, b.targets)) > 0
)
SELECT floor(d.time / $bucket_s) * $bucket_s AS bucket_start, count(*) AS decisions,
       count(c.id) AS in_conflict, 1 - count(c.id) / count(*) AS coherence
FROM decisions AS d LEFT JOIN conflicted AS c USING (id)
GROUP BY ALL
ORDER BY bucket_start
