-- 0004: graph snapshots record changes. Each record holds what was added (nodes, edges) and removed
-- (removed_nodes: ids; removed_edges: [{src, dst, kind}]) since the job's previous change; digest
-- identifies the whole graph after the change; a large change comes in parts 0..parts-1 (same digest and
-- valid_from). The graph at a time is every change up to then replayed in order (named query graph_at).
CREATE OR REPLACE VIEW graph_snapshots AS
SELECT s['id'] AS id,
       s['body']['job'] AS job,
       s['body']['valid_from'] AS valid_from,
       s['body']['digest'] AS digest,
       coalesce(s['body']['part'], 0) AS part,
       coalesce(s['body']['parts'], 1) AS parts,
       s['body']['nodes'] AS nodes,
       s['body']['edges'] AS edges,
       coalesce(s['body']['removed_nodes'], '[]') AS removed_nodes,
       coalesce(s['body']['removed_edges'], '[]') AS removed_edges,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"job": "VARCHAR", "valid_from": "DOUBLE", "digest": "VARCHAR", "part": "INTEGER", "parts": "INTEGER", "nodes": "JSON", "edges": "JSON", "removed_nodes": "JSON", "removed_edges": "JSON"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'graph_snapshot')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;
