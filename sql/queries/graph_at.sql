-- name: graph_at
-- answers: What did a job's operator graph look like at time T (the snapshot in force then)?
-- param: job VARCHAR  job id
-- param: at DOUBLE  event time (s since epoch)
SELECT valid_from, digest, json_array_length(nodes) AS node_count, json_array_length(edges) AS edge_count,
       nodes, edges
FROM graph_snapshots
WHERE job = $job AND valid_from <= $at
ORDER BY valid_from DESC, id
LIMIT 1
