-- name: preceding
-- answers: What happened in the horizon before a finding began: which decisions and which other findings?
-- param: finding_id VARCHAR  findings.id
-- param: horizon_s DOUBLE  how far back to look, seconds
WITH f AS (SELECT start_time FROM findings WHERE id = $finding_id)
SELECT 'decision' AS what, d.id, d.time AS at, f.start_time - d.time AS seconds_before,
       d.controller || ' ' || d.action AS summary, d.targets AS subjects
FROM decisions AS d, f
WHERE d.time <= f.start_time AND d.time >= f.start_time - $horizon_s
UNION ALL
SELECT 'finding', o.id, o.start_time, f.start_time - o.start_time, o.kind, o.subjects
FROM findings AS o, f
WHERE o.id <> $finding_id AND o.start_time <= f.start_time AND o.start_time >= f.start_time - $horizon_s
ORDER BY 3, 2
