-- name: graph_at
-- answers: What did a job's operator graph look like at time T (its recorded changes up to T, replayed)?
-- param: job VARCHAR  job id
-- param: at DOUBLE  event time (s since epoch)
WITH changes AS (
    SELECT valid_from, digest, source_partition, source_offset, part,
           json_transform(nodes, '[{"id": "VARCHAR"}]') AS added_nodes,
           json_transform(edges, '[{"src": "VARCHAR", "dst": "VARCHAR", "kind": "VARCHAR"}]') AS added_edges,
           json_transform(removed_nodes, '["VARCHAR"]') AS gone_nodes,
           json_transform(removed_edges, '[{"src": "VARCHAR", "dst": "VARCHAR", "kind": "VARCHAR"}]') AS gone_edges
    FROM graph_snapshots
    WHERE job = $job AND valid_from <= $at
),
node_events AS (
    SELECT valid_from, source_partition, source_offset, true AS present, unnest(added_nodes).id AS node FROM changes
    UNION ALL
    SELECT valid_from, source_partition, source_offset, false, unnest(gone_nodes) FROM changes
),
edge_events AS (
    SELECT valid_from, source_partition, source_offset, true AS present, unnest(added_edges) AS edge FROM changes
    UNION ALL
    SELECT valid_from, source_partition, source_offset, false, unnest(gone_edges) FROM changes
),
nodes_now AS (
    SELECT node FROM node_events
    QUALIFY row_number() OVER (PARTITION BY node ORDER BY valid_from DESC, source_partition DESC,
                                                         source_offset DESC) = 1 AND present
),
edges_now AS (
    SELECT edge FROM edge_events
    QUALIFY row_number() OVER (PARTITION BY edge ORDER BY valid_from DESC, source_partition DESC,
                                                         source_offset DESC) = 1 AND present
),
latest AS (
    SELECT valid_from, digest FROM changes ORDER BY valid_from DESC, source_partition DESC, source_offset DESC LIMIT 1
)
SELECT latest.valid_from, latest.digest,
       (SELECT count(*) FROM nodes_now) AS node_count,
       (SELECT count(*) FROM edges_now) AS edge_count,
       (SELECT list(node ORDER BY node) FROM nodes_now) AS nodes,
       (SELECT list(edge ORDER BY edge.src, edge.dst, edge.kind) FROM edges_now) AS edges
FROM latest
