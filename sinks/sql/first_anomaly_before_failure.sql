-- name: first_anomaly_before_failure
-- summary: The earliest anomaly in the lookback before a job's first failure signal.
-- Failure signals: an error span, an NCCL/ProcessGroup error or watchdog timeout, or the
-- scheduler failing, preempting or OOM-killing. Anomalies: GPU events (XID, ECC, throttling, GPU
-- not answering), fabric events other than a link coming up, and detections. Node-level events
-- without a job id count when they come from one of the job's nodes. At equal times, hardware
-- events come before the detections derived from them.
-- param: job_id String  the job
-- param: lookback_s UInt32 = 600  how far before the failure to look
WITH
    nodes AS (SELECT DISTINCT node FROM {db:Identifier}.spans WHERE job_id = {job_id:String}),
    failure AS (
        SELECT min(ts) AS failure_ts FROM (
            SELECT ts FROM {db:Identifier}.spans FINAL
            WHERE job_id = {job_id:String} AND status = 'error'
            UNION ALL
            SELECT ts FROM {db:Identifier}.comm_events FINAL
            WHERE job_id = {job_id:String} AND event_type IN
                ('watchdog_timeout', 'nccl_error', 'process_group_abort', 'remote_process_exited')
            UNION ALL
            SELECT ts FROM {db:Identifier}.scheduler_events FINAL
            WHERE job_id = {job_id:String} AND event_type IN
                ('job_failed', 'preempted', 'oom_killed', 'node_down')
        )
    ),
    anomalies AS (
        SELECT ts, 'gpu_event' AS source, node, rank,
            concat(event_type, if(xid IS NULL, '', concat(' XID ', toString(xid)))) AS what
        FROM {db:Identifier}.gpu_events FINAL
        WHERE job_id = {job_id:String} OR (job_id = '' AND node IN nodes)
        UNION ALL
        SELECT ts, 'fabric_event', node, rank,
            concat(event_type, ' ', device, if(port IS NULL, '', concat(':', toString(port))))
        FROM {db:Identifier}.fabric_events FINAL
        WHERE (job_id = {job_id:String} OR (job_id = '' AND node IN nodes))
            AND event_type != 'link_up'
        UNION ALL
        SELECT fromUnixTimestamp64Nano(onset_ts_ns), 'detection', node, rank,
            concat(detection_type, ': ', summary)
        FROM {db:Identifier}.detections FINAL
        WHERE job_id = {job_id:String}
    )
SELECT
    (SELECT failure_ts FROM failure) AS failure_ts,
    a.ts AS anomaly_ts,
    round(dateDiff('millisecond', a.ts, (SELECT failure_ts FROM failure)) / 1000, 3) AS lead_s,
    a.source,
    a.node,
    a.rank,
    a.what
FROM anomalies AS a
WHERE (SELECT count() FROM failure WHERE failure_ts > toDateTime64(0, 9)) > 0
    AND a.ts <= (SELECT failure_ts FROM failure)
    AND a.ts >= (SELECT failure_ts FROM failure) - toIntervalSecond({lookback_s:UInt32})
ORDER BY a.ts, indexOf(['gpu_event', 'fabric_event', 'detection'], a.source), a.node
LIMIT 1
