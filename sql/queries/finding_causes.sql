-- name: finding_causes
-- answers: What caused this finding, ranked, with each cause's share of the cost (and the decision behind it)?
-- param: finding_id VARCHAR  findings.id
SELECT a.rank, a.cause_kind, a.cause, a.share, a.slowdown, a.cost_accel_s,
       d.controller AS decided_by, d.action AS decision_action, d.reason AS decision_reason
FROM attributions AS a
LEFT JOIN decisions AS d ON a.cause_kind = 'decision' AND d.id = a.cause
WHERE a.finding_id = $finding_id
ORDER BY a.rank, a.cause
