-- rankscope 0007: rollups and skip indexes (issue 6).
-- Rollups are AggregatingMergeTree tables fed by materialized views on insert, so week-long
-- panels read minutes or hours instead of samples. They see every inserted row: a batch the sink
-- re-delivers after a crash is counted twice there (the base tables, read with FINAL, stay
-- exact). Existing rows are backfilled once here.

CREATE TABLE IF NOT EXISTS {db}.gpu_minute
(
    job_id      LowCardinality(String),
    minute      DateTime('UTC'),
    rank        Int32,
    node        SimpleAggregateFunction(any, LowCardinality(String)),
    samples     SimpleAggregateFunction(sum, UInt64),
    util_avg    AggregateFunction(avg, Float32),
    power_avg   AggregateFunction(avg, Nullable(Float32)),
    temp_max    SimpleAggregateFunction(max, Nullable(Float32)),
    energy_min  SimpleAggregateFunction(min, Nullable(UInt64)),
    energy_max  SimpleAggregateFunction(max, Nullable(UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(minute)
ORDER BY (job_id, minute, rank);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.gpu_minute_mv TO {db}.gpu_minute AS
SELECT job_id, toStartOfMinute(ts) AS minute, rank, any(node) AS node, count() AS samples,
    avgState(sm_util_pct) AS util_avg, avgState(power_w) AS power_avg,
    max(temperature_c) AS temp_max, min(energy_mj) AS energy_min, max(energy_mj) AS energy_max
FROM {db}.gpu_samples
GROUP BY job_id, minute, rank;

INSERT INTO {db}.gpu_minute
SELECT job_id, toStartOfMinute(ts) AS minute, rank, any(node), count(),
    avgState(sm_util_pct), avgState(power_w), max(temperature_c), min(energy_mj), max(energy_mj)
FROM {db}.gpu_samples FINAL
GROUP BY job_id, minute, rank;

CREATE TABLE IF NOT EXISTS {db}.node_hour
(
    cluster      LowCardinality(String),
    node         LowCardinality(String),
    hour         DateTime('UTC'),
    xids         SimpleAggregateFunction(sum, UInt64),
    gpu_events   SimpleAggregateFunction(sum, UInt64),
    link_errors  SimpleAggregateFunction(sum, UInt64),
    nccl_errors  SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, node, hour);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.node_hour_gpu_mv TO {db}.node_hour AS
SELECT cluster, node, toStartOfHour(ts) AS hour, countIf(event_type = 'xid') AS xids,
    count() AS gpu_events, toUInt64(0) AS link_errors, toUInt64(0) AS nccl_errors
FROM {db}.gpu_events
GROUP BY cluster, node, hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.node_hour_fabric_mv TO {db}.node_hour AS
SELECT cluster, node, toStartOfHour(ts) AS hour, toUInt64(0) AS xids, toUInt64(0) AS gpu_events,
    countIf(event_type IN ('link_down', 'error_counter_increase', 'nvlink_down', 'nvlink_error'))
        AS link_errors,
    toUInt64(0) AS nccl_errors
FROM {db}.fabric_events
GROUP BY cluster, node, hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.node_hour_comm_mv TO {db}.node_hour AS
SELECT cluster, node, toStartOfHour(ts) AS hour, toUInt64(0) AS xids, toUInt64(0) AS gpu_events,
    toUInt64(0) AS link_errors,
    countIf(event_type IN ('nccl_error', 'net_ib_error', 'watchdog_timeout',
        'remote_process_exited', 'process_group_abort')) AS nccl_errors
FROM {db}.comm_events
GROUP BY cluster, node, hour;

INSERT INTO {db}.node_hour
SELECT cluster, node, hour, sum(x), sum(g), sum(l), sum(n) FROM (
    SELECT cluster, node, toStartOfHour(ts) AS hour, countIf(event_type = 'xid') AS x,
        count() AS g, toUInt64(0) AS l, toUInt64(0) AS n
    FROM {db}.gpu_events FINAL GROUP BY cluster, node, hour
    UNION ALL
    SELECT cluster, node, toStartOfHour(ts), 0, 0,
        countIf(event_type IN ('link_down', 'error_counter_increase', 'nvlink_down',
            'nvlink_error')), 0
    FROM {db}.fabric_events FINAL GROUP BY cluster, node, toStartOfHour(ts)
    UNION ALL
    SELECT cluster, node, toStartOfHour(ts), 0, 0, 0,
        countIf(event_type IN ('nccl_error', 'net_ib_error', 'watchdog_timeout',
            'remote_process_exited', 'process_group_abort'))
    FROM {db}.comm_events FINAL GROUP BY cluster, node, toStartOfHour(ts)
)
GROUP BY cluster, node, hour;

ALTER TABLE {db}.spans ADD INDEX IF NOT EXISTS idx_status status TYPE set(8) GRANULARITY 4;

ALTER TABLE {db}.comm_events ADD INDEX IF NOT EXISTS idx_event_type event_type
    TYPE set(16) GRANULARITY 4;

ALTER TABLE {db}.gpu_events ADD INDEX IF NOT EXISTS idx_event_type event_type
    TYPE set(16) GRANULARITY 4;
