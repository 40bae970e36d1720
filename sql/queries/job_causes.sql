-- name: job_causes
-- answers: Every finding about a job in a time window and its causes, ranked: the attributed causes (elements and decisions: share of the finding's cost, slowdown both ways, accelerator-seconds, the decision's controller), and for a loss of control coherence without attributions (control_conflict, energy_feedback_loop) the decisions of the controllers that fought, in time order; findings worst first by their accelerator-seconds where they have a cost, then by time. A finding is about the job when a subject is the job, one of its elements or an element its operator graph has held, or a decision of the job is among its causes. A finding without causes is one row with cause NULL.
-- param: job VARCHAR  job id
-- param: start DOUBLE  event time (s since epoch) the window starts, inclusive
-- param: end DOUBLE  event time (s since epoch) the window ends, exclusive
WITH graph AS (
    SELECT DISTINCT unnest(json_transform(nodes, '[{"id": "VARCHAR"}]')).id AS element
    FROM graph_snapshots
    WHERE job = $job
),
in_window AS (
    SELECT * FROM findings WHERE start_time >= $start AND start_time < $end
),
attributed AS (
    SELECT a.finding_id, a.rank, a.cause_kind, a.cause, a.share, a.slowdown, a.slowdown_unhealed, a.cost_accel_s,
           'attributed' AS how
    FROM attributions AS a
    JOIN in_window AS f ON f.id = a.finding_id
),
-- the decisions of a coherence finding: its conflicting pairs (evidence.pairs: decision ids), or, for a
-- finding that names only the controllers (evidence.controllers), theirs within the finding's span
fought AS (
    SELECT f.id AS finding_id, d.id AS decision_id, d.time,
           CASE WHEN json_type(f.evidence->'pairs') = 'ARRAY' THEN 'conflicting pair'
                ELSE 'controller in the loop' END AS how
    FROM in_window AS f
    JOIN decisions AS d
      ON (json_type(f.evidence->'pairs') = 'ARRAY'
          AND list_contains(flatten(json_transform(f.evidence->'pairs', '[["VARCHAR"]]')), d.id))
      OR (json_type(f.evidence->'controllers') = 'ARRAY'
          AND list_contains(json_transform(f.evidence->'controllers', '["VARCHAR"]'), 'controller:' || d.controller)
          AND d.time >= f.start_time AND d.time <= f.end_time)
    WHERE f.id NOT IN (SELECT finding_id FROM attributed)
),
causes AS (
    SELECT * FROM attributed
    UNION ALL
    SELECT finding_id, row_number() OVER (PARTITION BY finding_id ORDER BY time, decision_id), 'decision',
           decision_id, NULL, NULL, NULL, NULL, how
    FROM fought
),
about AS (
    SELECT f.* FROM in_window AS f
    WHERE len(list_filter(f.subjects, lambda s: s = 'job:' || $job OR contains(s, ':' || $job || '/'))) > 0
       OR EXISTS (SELECT 1 FROM graph AS g WHERE list_contains(f.subjects, g.element))
       OR EXISTS (SELECT 1 FROM causes AS c JOIN decisions AS d ON c.cause_kind = 'decision' AND d.id = c.cause
                  WHERE c.finding_id = f.id AND d.job = $job)
)
SELECT f.kind AS finding, f.id AS finding_id, f.start_time, f.end_time, f.severity, f.subjects,
       coalesce(TRY_CAST(f.cost->>'accel_s' AS DOUBLE), max(c.cost_accel_s) OVER (PARTITION BY f.id))
           AS finding_cost_accel_s,
       c.rank, c.cause_kind, c.cause, c.how, c.share, c.slowdown, c.slowdown_unhealed, c.cost_accel_s,
       d.controller AS decided_by, d.action AS decision_action, d.time AS decision_time
FROM about AS f
LEFT JOIN causes AS c ON c.finding_id = f.id
LEFT JOIN decisions AS d ON c.cause_kind = 'decision' AND d.id = c.cause
ORDER BY finding_cost_accel_s DESC NULLS LAST, f.start_time, f.id, c.rank, c.cause
