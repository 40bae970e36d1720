-- name: decisions_touching
-- answers: Which control decisions acted on a part of the operator graph (an element and everything under it) in a window?
-- param: element VARCHAR  element id or prefix, e.g. node:node7 or rank:llm-70b/
-- param: start DOUBLE  event time (s) the window starts, inclusive
-- param: end DOUBLE  event time (s) the window ends, exclusive
SELECT id, time, controller, layer, action, targets, parameters, reason, expected_metric, expected_direction
FROM decisions
WHERE time >= $start AND time < $end
  AND len(list_filter(targets, lambda t: starts_with(t, $element))) > 0
ORDER BY time, id
