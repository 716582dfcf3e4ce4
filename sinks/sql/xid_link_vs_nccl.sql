-- name: xid_link_vs_nccl
-- summary: Per node, XIDs and link errors, and the NCCL errors that followed them in the same job.
-- An NCCL error (error, network error, watchdog timeout, remote exit, abort) on any node is
-- attributed to the latest XID or link error of the same job before it, when it came within
-- follow_s; so a node whose hardware errors precede its peers' NCCL failures stands out.
-- param: hours UInt32 = 24  how far back
-- param: cluster String = ''  one cluster (empty: all)
-- param: follow_s UInt32 = 120  how soon after a hardware error an NCCL error counts
WITH
    hw AS (
        SELECT job_id, node, ts, 'xid' AS what
        FROM {db:Identifier}.gpu_events FINAL
        WHERE event_type = 'xid' AND ts >= now64() - toIntervalHour({hours:UInt32})
            AND ({cluster:String} = '' OR cluster = {cluster:String})
        UNION ALL
        SELECT job_id, node, ts, 'link'
        FROM {db:Identifier}.fabric_events FINAL
        WHERE event_type IN ('link_down', 'error_counter_increase', 'nvlink_down', 'nvlink_error')
            AND ts >= now64() - toIntervalHour({hours:UInt32})
            AND ({cluster:String} = '' OR cluster = {cluster:String})
    ),
    nccl AS (
        SELECT job_id, node AS nccl_node, ts AS nccl_ts
        FROM {db:Identifier}.comm_events FINAL
        WHERE event_type IN ('nccl_error', 'net_ib_error', 'watchdog_timeout',
                'remote_process_exited', 'process_group_abort')
            AND ts >= now64() - toIntervalHour({hours:UInt32})
            AND ({cluster:String} = '' OR cluster = {cluster:String})
    ),
    followed AS (
        SELECT hw.node AS node, nccl.nccl_node, dateDiff('millisecond', hw.ts, nccl.nccl_ts) AS lag_ms
        FROM nccl ASOF INNER JOIN hw ON nccl.job_id = hw.job_id AND nccl.nccl_ts >= hw.ts
        WHERE lag_ms <= {follow_s:UInt32} * 1000
    )
SELECT
    h.node AS node,
    h.xids,
    h.link_errors,
    count(f.node) AS nccl_errors_after,
    uniqExactIf(f.nccl_node, f.node != '') AS nodes_with_nccl_errors,
    if(count(f.node) = 0, NULL, round(min(f.lag_ms) / 1000, 3)) AS first_lag_s
FROM (
    SELECT node, countIf(what = 'xid') AS xids, countIf(what = 'link') AS link_errors
    FROM hw GROUP BY node
) AS h
LEFT JOIN followed AS f ON f.node = h.node
GROUP BY h.node, h.xids, h.link_errors
ORDER BY h.xids + h.link_errors DESC, nccl_errors_after DESC, node
