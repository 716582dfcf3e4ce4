-- name: incident_timeline
-- summary: A job's incidents as one timeline: every evidence item in corrected time, cause first.
-- The latest revision of each incident (FINAL) with its evidence chain expanded, and each item's
-- offset from the first cause: what failed first and what followed, on which node and rank.
-- param: job_id String  the job
SELECT
    incident_id,
    cause_class,
    confidence,
    fromUnixTimestamp64Nano(JSONExtractInt(item, 'ts')) AS ts,
    round((JSONExtractInt(item, 'ts') - first_cause_ts_ns) / 1e9, 3) AS offset_s,
    JSONExtractString(item, 'role') AS role,
    JSONExtractString(item, 'node') AS node,
    JSONExtract(item, 'rank', 'Nullable(Int32)') AS rank,
    JSONExtractString(item, 'kind') AS kind,
    JSONExtractString(item, 'what') AS what
FROM {db:Identifier}.incidents FINAL
ARRAY JOIN JSONExtractArrayRaw(evidence_json) AS item
WHERE job_id = {job_id:String}
ORDER BY first_cause_ts_ns, incident_id, ts, role
