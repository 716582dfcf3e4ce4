-- rankscope 0016: fleet drift (issue 19). drift_slowdown.sql finds the windows of ranks on
-- drifted nodes by node, which is not in rank_windows' sort key (job, time, rank): a bloom
-- filter on node lets that lookup skip granules instead of reading every window.

ALTER TABLE {db}.rank_windows ADD INDEX IF NOT EXISTS idx_node node
    TYPE bloom_filter(0.01) GRANULARITY 4;

-- Per job and hour, the steps and their summed step time (from the rank windows): the clean
-- jobs' baseline of drift_slowdown reads this instead of every window since the first drift.
-- Fed by a materialized view on insert, so a window written twice (at-least-once) counts twice,
-- as in node_hour; an hour's mean moves by it only when the same window arrives again.
CREATE TABLE IF NOT EXISTS {db}.job_hour_steps
(
    cluster     LowCardinality(String),
    job_id      LowCardinality(String),
    hour        DateTime('UTC'),
    step_s_sum  SimpleAggregateFunction(sum, Float64),
    steps       SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour, job_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.job_hour_steps_mv TO {db}.job_hour_steps AS
SELECT cluster, job_id, toStartOfHour(window_start) AS hour,
    sum(step_time_mean_s * step_count) AS step_s_sum, toUInt64(sum(step_count)) AS steps
FROM {db}.rank_windows
WHERE step_time_mean_s IS NOT NULL AND step_count > 0
GROUP BY cluster, job_id, hour;

INSERT INTO {db}.job_hour_steps
SELECT cluster, job_id, toStartOfHour(window_start) AS hour,
    sum(step_time_mean_s * step_count), toUInt64(sum(step_count))
FROM {db}.rank_windows FINAL
WHERE step_time_mean_s IS NOT NULL AND step_count > 0
GROUP BY cluster, job_id, hour;
