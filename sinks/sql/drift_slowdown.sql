-- name: drift_slowdown
-- summary: Do jobs on drifted nodes run slower? Their step time vs clean jobs and vs their own other nodes.
-- For each node_drift finding and each job with ranks on that node while it was drifted (from
-- `since` until it cleared), over those windows: the job's mean step time (weighted by steps),
-- against the mean of the jobs that ran on no drifted node since the first drift, over the
-- same hours (`clean_step_s`, `slowdown_pct`); and the drifted node's ranks against the job's ranks
-- on undrifted nodes (`vs_same_job_pct`). A data-parallel job waits for its slowest rank at
-- every collective, so its step spans are as slow on every node: the first comparison shows
-- the cost, the second shows a node whose own ranks are slower (pipeline or async jobs).
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
drifted_jobs AS (
    SELECT DISTINCT job_id FROM {db:Identifier}.rank_windows
    WHERE node IN (SELECT node FROM drift)
        AND window_start >= (SELECT fromUnixTimestamp64Nano(min(since_ns)) FROM drift)
        AND ({cluster:String} = '' OR cluster = {cluster:String})
),
windows AS (
    SELECT cluster, job_id, rank, node, window_start_ns, step_count, step_time_mean_s
    FROM {db:Identifier}.rank_windows FINAL
    WHERE job_id IN (SELECT job_id FROM drifted_jobs)
        AND step_time_mean_s IS NOT NULL AND step_count > 0
        AND ({cluster:String} = '' OR cluster = {cluster:String})
        AND ({hours:UInt32} = 0 OR window_start >= now64() - toIntervalHour({hours:UInt32}))
),
touched AS (
    SELECT DISTINCT w.cluster AS cluster, w.job_id AS job_id, d.detection_id AS detection_id,
        d.node AS drifted_node, d.differs AS differs, d.since_ns AS since_ns,
        d.cleared_ns AS cleared_ns
    FROM windows AS w
    INNER JOIN drift AS d ON w.cluster = d.cluster AND w.node = d.node
    WHERE w.window_start_ns >= d.since_ns
        AND (d.cleared_ns = 0 OR w.window_start_ns < d.cleared_ns)
),
jobs AS (
    SELECT t.cluster AS cluster, t.job_id AS job_id, t.drifted_node AS drifted_node,
        t.differs AS differs, t.detection_id AS detection_id,
        toStartOfHour(fromUnixTimestamp64Nano(min(w.window_start_ns))) AS from_hour,
        toStartOfHour(fromUnixTimestamp64Nano(max(w.window_start_ns))) AS to_hour,
        uniqExactIf(w.rank, w.node = t.drifted_node) AS drifted_ranks,
        sum(w.step_time_mean_s * w.step_count) / sum(w.step_count) AS job_step_s,
        sumIf(w.step_time_mean_s * w.step_count, w.node = t.drifted_node)
            / sumIf(w.step_count, w.node = t.drifted_node) AS drifted_step_s,
        sumIf(w.step_time_mean_s * w.step_count, w.node NOT IN (SELECT node FROM drift))
            / nullIf(sumIf(w.step_count, w.node NOT IN (SELECT node FROM drift)), 0)
            AS other_step_s
    FROM touched AS t
    INNER JOIN windows AS w ON w.cluster = t.cluster AND w.job_id = t.job_id
    WHERE w.window_start_ns >= t.since_ns
        AND (t.cleared_ns = 0 OR w.window_start_ns < t.cleared_ns)
    GROUP BY t.cluster, t.job_id, t.drifted_node, t.differs, t.detection_id
),
clean AS (
    -- the jobs that ran on no drifted node, per hour, from the hourly rollup (migration 0016)
    SELECT cluster, hour, job_id, sum(step_s_sum) AS step_s_sum, sum(steps) AS steps
    FROM {db:Identifier}.job_hour_steps
    WHERE job_id NOT IN (SELECT job_id FROM drifted_jobs)
        AND hour >= (SELECT toStartOfHour(fromUnixTimestamp64Nano(min(since_ns))) FROM drift)
        AND ({cluster:String} = '' OR cluster = {cluster:String})
        AND ({hours:UInt32} = 0 OR hour >= toStartOfHour(now64() - toIntervalHour({hours:UInt32})))
    GROUP BY cluster, hour, job_id
)
SELECT j.job_id AS job_id, j.drifted_node AS drifted_node, j.differs AS differs,
    j.drifted_ranks AS drifted_ranks, round(j.job_step_s, 6) AS job_step_s,
    uniqExactIf(c.job_id, c.hour BETWEEN j.from_hour AND j.to_hour) AS clean_jobs,
    round(sumIf(c.step_s_sum, c.hour BETWEEN j.from_hour AND j.to_hour)
        / nullIf(sumIf(c.steps, c.hour BETWEEN j.from_hour AND j.to_hour), 0), 6)
        AS clean_step_s,
    round((j.job_step_s / clean_step_s - 1) * 100, 2) AS slowdown_pct,
    round(j.drifted_step_s, 6) AS drifted_step_s, round(j.other_step_s, 6) AS other_step_s,
    round((j.drifted_step_s / j.other_step_s - 1) * 100, 2) AS vs_same_job_pct
FROM jobs AS j
LEFT JOIN clean AS c ON c.cluster = j.cluster
GROUP BY j.job_id, j.drifted_node, j.differs, j.drifted_ranks, j.job_step_s, j.from_hour,
    j.to_hour, j.drifted_step_s, j.other_step_s, j.detection_id
ORDER BY slowdown_pct DESC, job_id, drifted_node
