-- 0006: attributions carry both definitions of a cause's slowdown. slowdown: heal only this cause
-- (actual / actual with it healed); slowdown_unhealed: leave only this cause unhealed (ideal step from
-- peers except it / ideal), NULL where the cause was not judged against the ideal (drift findings,
-- decisions, records written before this migration). Roll-ups step_ideal_s, step_modelled_s and
-- blocking_slowdown (entity job:<j>) need no schema change: they are rows of metrics_rollup.
CREATE OR REPLACE VIEW attributions AS
SELECT s['id'] AS id,
       s['body']['finding_id'] AS finding_id,
       s['body']['rank'] AS rank,
       s['body']['cause_kind'] AS cause_kind,
       s['body']['cause'] AS cause,
       s['body']['share'] AS share,
       s['body']['slowdown'] AS slowdown,
       s['body']['cost_accel_s'] AS cost_accel_s,
       s['body']['evidence'] AS evidence,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset,
       s['body']['slowdown_unhealed'] AS slowdown_unhealed
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"finding_id": "VARCHAR", "rank": "INTEGER", "cause_kind": "VARCHAR", "cause": "VARCHAR", "share": "DOUBLE", "slowdown": "DOUBLE", "slowdown_unhealed": "DOUBLE", "cost_accel_s": "DOUBLE", "evidence": "JSON"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'attribution')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;
