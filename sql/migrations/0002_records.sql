-- 0002: the records the engine emits, as views over audit_log (one JSON parse per query; nothing is stored
-- twice, so the derived data cannot drift from the hash-chained raw records). Each view keeps the first
-- record per id in audit-log order (a worker re-delivery repeats an id). Every view also has
-- source_topic/source_partition/source_offset: the input position the record was emitted at.

-- Findings: something degraded. kind: step_time_drift | straggler | straggler_cascade | sync_loss | ...;
-- subjects: operator-graph element ids (job:<id>, rank:<job>/<r>, ...); start_time/end_time: event time (s)
-- the degradation began / of the last evidence at detection; severity: e.g. observed / baseline; cost: unit
-- -> estimate, e.g. {"accel_s": 812.5}.
CREATE VIEW findings AS
SELECT s['id'] AS id,
       s['body']['kind'] AS kind,
       s['body']['subjects'] AS subjects,
       s['body']['start'] AS start_time,
       s['body']['end'] AS end_time,
       s['body']['severity'] AS severity,
       s['body']['evidence'] AS evidence,
       s['body']['cost'] AS cost,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"kind": "VARCHAR", "subjects": "VARCHAR[]", "start": "DOUBLE", "end": "DOUBLE", "severity": "DOUBLE", "evidence": "JSON", "cost": "JSON"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'finding')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;

-- Rejected input, one row per (input message, reason); the original bytes are on the dead-letter topic.
-- reason: see docs/contract.md; detail: the first rejected sample's precise reason; sample_count: samples
-- rejected for this reason (1 for a whole message); sample_indices: their positions (first 1000);
-- whole_message: the message as a whole was refused.
CREATE VIEW dead_letters AS
SELECT s['id'] AS id,
       s['body']['reason'] AS reason,
       s['body']['detail'] AS detail,
       s['body']['count'] AS sample_count,
       s['body']['indices'] AS sample_indices,
       s['body']['whole_message'] AS whole_message,
       s['body']."original_sha256" AS original_sha256,
       s['body']['original_bytes'] AS original_bytes,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"reason": "VARCHAR", "detail": "VARCHAR", "count": "INTEGER", "indices": "INTEGER[]", "whole_message": "BOOLEAN", "original_sha256": "VARCHAR", "original_bytes": "BIGINT"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'dead_letter')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;

-- Control decisions: what the scheduler, autoscaler, retry logic, runtime, power manager and policy gates
-- did. id: the producer's decision id; layer: scheduler | orchestrator | autoscaler | runtime | retry |
-- model | policy | power | other; targets: operator-graph element ids acted on;
-- expected_metric/expected_direction: the effect it expected (up | down | none); job: '' when not job-
-- specific.
CREATE VIEW decisions AS
SELECT s['body']['id'] AS id,
       s['body']['time'] AS time,
       s['body']['controller'] AS controller,
       s['body']['layer'] AS layer,
       s['body']['action'] AS action,
       s['body']['targets'] AS targets,
       s['body']['parameters'] AS parameters,
       s['body']['reason'] AS reason,
       s['body']['expected_effect']['metric'] AS expected_metric,
       s['body']['expected_effect']['direction'] AS expected_direction,
       s['body']['job'] AS job,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"body": {"id": "VARCHAR", "time": "DOUBLE", "controller": "VARCHAR", "layer": "VARCHAR", "action": "VARCHAR", "targets": "VARCHAR[]", "parameters": "JSON", "reason": "VARCHAR", "expected_effect": {"metric": "VARCHAR", "direction": "VARCHAR"}, "job": "VARCHAR"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'decision')
QUALIFY row_number() OVER (PARTITION BY s['body']['id'] ORDER BY "partition", "offset") = 1;

-- A ranked cause of a finding. rank: 1 = most likely; cause_kind: element | decision; cause: element id
-- (rank:job/3, stage:job/2, link:a-b, ...) or decision id; share: of the finding's cost (0..1); slowdown:
-- actual / counterfactual step time with this cause healed; cost_accel_s: accelerator-seconds attributed.
CREATE VIEW attributions AS
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
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"finding_id": "VARCHAR", "rank": "INTEGER", "cause_kind": "VARCHAR", "cause": "VARCHAR", "share": "DOUBLE", "slowdown": "DOUBLE", "cost_accel_s": "DOUBLE", "evidence": "JSON"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'attribution')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;

-- The operator graph of a job as it changed (a snapshot only when it changed). valid_from: event time from
-- which it holds; digest: content hash; nodes: [{id, kind, ...}]; edges: [{src, dst, kind}].
CREATE VIEW graph_snapshots AS
SELECT s['id'] AS id,
       s['body']['job'] AS job,
       s['body']['valid_from'] AS valid_from,
       s['body']['digest'] AS digest,
       s['body']['nodes'] AS nodes,
       s['body']['edges'] AS edges,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"job": "VARCHAR", "valid_from": "DOUBLE", "digest": "VARCHAR", "nodes": "JSON", "edges": "JSON"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'graph_snapshot')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;

-- Windowed roll-ups of the key series per job and entity. entity: element id (job:x, or cause:straggler_wait
-- ...); name: step_s | accel_s_per_output | power_w | wasted_accel_s ...; total: sum over the window (for
-- additive series).
CREATE VIEW metrics_rollup AS
SELECT s['id'] AS id,
       s['body']['job'] AS job,
       s['body']['entity'] AS entity,
       s['body']['name'] AS name,
       s['body']['window_start'] AS window_start,
       s['body']['window_end'] AS window_end,
       s['body']['n'] AS n,
       s['body']['mean'] AS mean,
       s['body']."p50" AS p50,
       s['body']."p99" AS p99,
       s['body']['min'] AS min,
       s['body']['max'] AS max,
       s['body']['total'] AS total,
       s['source']['topic'] AS source_topic,
       s['source']['partition'] AS source_partition,
       s['source']['offset'] AS source_offset
FROM (SELECT json_transform(decode(value), '{"id": "VARCHAR", "body": {"job": "VARCHAR", "entity": "VARCHAR", "name": "VARCHAR", "window_start": "DOUBLE", "window_end": "DOUBLE", "n": "BIGINT", "mean": "DOUBLE", "p50": "DOUBLE", "p99": "DOUBLE", "min": "DOUBLE", "max": "DOUBLE", "total": "DOUBLE"}, "source": {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT"}}') AS s, "partition", "offset"
      FROM audit_log WHERE record_type = 'metrics_rollup')
QUALIFY row_number() OVER (PARTITION BY s['id'] ORDER BY "partition", "offset") = 1;
