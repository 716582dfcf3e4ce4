-- name: drift_slowdown
-- summary: Do jobs on drifted nodes run slower? Their ranks' step time vs the same jobs' other nodes.
-- For each node_drift finding and each job with ranks on that node while it was drifted (from
-- `since` until it cleared), the mean step time (weighted by steps) of the job's ranks on the
-- drifted node against its ranks on nodes never named by a drift finding, over the same
-- windows. slowdown_pct = (drifted / others - 1) * 100. Read from the per-rank windows.
-- param: cluster String = ''  one cluster (empty: all)
-- param: hours UInt32 = 0  how far back (0: everything)
WITH drift AS (
    SELECT detection_id, cluster, node,
        argMax(details['differs'], emitted_ts_ns) AS differs,
        min(onset_ts_ns) AS since_ns,
        argMax(toInt64OrZero(details['cleared_ts']), emitted_ts_ns) AS cleared_ns
    FROM {db:Identifier}.detections
    WHERE detection_type = 'node_drift'
        AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY detection_id, cluster, node
),
windows AS (
    SELECT cluster, job_id, rank, node, window_start_ns, step_count, step_time_mean_s
    FROM {db:Identifier}.rank_windows FINAL
    WHERE step_time_mean_s IS NOT NULL AND step_count > 0
        AND ({cluster:String} = '' OR cluster = {cluster:String})
        AND ({hours:UInt32} = 0 OR window_start >= now64() - toIntervalHour({hours:UInt32}))
),
touched AS (
    SELECT DISTINCT w.cluster AS cluster, w.job_id AS job_id, d.detection_id AS detection_id,
        d.node AS drifted_node, d.differs AS differs, d.since_ns AS since_ns,
        d.cleared_ns AS cleared_ns
    FROM windows AS w
    INNER JOIN drift AS d ON w.cluster = d.cluster AND w.node = d.node
    WHERE w.node IN (SELECT node FROM drift) AND w.window_start_ns >= d.since_ns
        AND (d.cleared_ns = 0 OR w.window_start_ns < d.cleared_ns)
)
SELECT t.job_id AS job_id, t.drifted_node AS drifted_node, t.differs AS differs,
    uniqExactIf(w.rank, w.node = t.drifted_node) AS drifted_ranks,
    uniqExactIf(w.rank, w.node != t.drifted_node) AS other_ranks,
    round(sumIf(w.step_time_mean_s * w.step_count, w.node = t.drifted_node)
        / sumIf(w.step_count, w.node = t.drifted_node), 6) AS drifted_step_s,
    round(sumIf(w.step_time_mean_s * w.step_count, w.node != t.drifted_node)
        / nullIf(sumIf(w.step_count, w.node != t.drifted_node), 0), 6) AS other_step_s,
    round((drifted_step_s / other_step_s - 1) * 100, 2) AS slowdown_pct
FROM touched AS t
INNER JOIN windows AS w ON w.cluster = t.cluster AND w.job_id = t.job_id
WHERE w.window_start_ns >= t.since_ns AND (t.cleared_ns = 0 OR w.window_start_ns < t.cleared_ns)
    AND (w.node = t.drifted_node OR w.node NOT IN (SELECT node FROM drift))
GROUP BY t.job_id, t.drifted_node, t.differs, t.detection_id
ORDER BY slowdown_pct DESC, job_id, drifted_node
