-- name: controller_conflicts
-- answers: Which pairs of decisions by different controllers acted on the same element within a short time, pulling the same metric in opposite directions or repeating each other's work (loss of control coherence)?
-- param: window_s DOUBLE  how close in time two decisions must be, seconds
SELECT a.id AS first_id, b.id AS second_id, a.controller AS first_controller, b.controller AS second_controller,
       list_intersect(a.targets, b.targets) AS shared_targets, b.time - a.time AS seconds_apart,
       CASE WHEN a.expected_metric = b.expected_metric AND a.expected_direction <> b.expected_direction
            THEN 'opposed' ELSE 'overlapping' END AS conflict
FROM decisions AS a
JOIN decisions AS b
  ON a.controller <> b.controller AND b.time >= a.time AND b.time - a.time <= $window_s
 AND (b.time > a.time OR a.id < b.id)
 AND len(list_intersect(a.targets, b.targets)) > 0
ORDER BY a.time, a.id, b.id
