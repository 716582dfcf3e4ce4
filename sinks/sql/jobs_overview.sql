-- name: jobs_overview
-- summary: The fleet: each job seen recently with its size, progress and findings.
-- param: hours UInt32 = 24  how far back
-- param: cluster String = ''  one cluster (empty: all)
SELECT
    s.cluster AS cluster, s.job_id AS job_id, s.ranks AS ranks, s.nodes AS nodes,
    s.first_ts AS first_ts, s.last_ts AS last_ts, s.steps AS steps, s.error_spans AS error_spans,
    coalesce(i.incidents, 0) AS incidents,
    coalesce(d.stragglers, 0) AS stragglers,
    coalesce(d.hangs, 0) AS hangs
FROM (
    SELECT cluster, job_id, uniqExact(rank) AS ranks, uniqExact(node) AS nodes,
        min(ts) AS first_ts, max(ts) AS last_ts,
        maxIf(step, phase = 'step' AND status = 'ok') AS steps,
        countIf(status = 'error') AS error_spans
    FROM {db:Identifier}.spans FINAL
    WHERE ts >= now64() - toIntervalHour({hours:UInt32})
        AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY cluster, job_id
) AS s
LEFT JOIN (
    SELECT job_id, count() AS incidents FROM {db:Identifier}.incidents FINAL GROUP BY job_id
) AS i USING job_id
LEFT JOIN (
    SELECT job_id, countIf(detection_type = 'straggler') AS stragglers,
        countIf(detection_type = 'hang') AS hangs
    FROM {db:Identifier}.detections FINAL GROUP BY job_id
) AS d USING job_id
ORDER BY s.last_ts DESC, s.job_id
