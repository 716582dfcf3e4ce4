-- rankscope 0006: spans and GPU samples ordered by (job, time, rank) instead of (job, rank, time)
-- (issue 6). The named queries and the dashboards ask "this job, this time range, every rank";
-- with rank before time, each rank's block of a day is a granule or two, and a one-hour filter
-- could skip nothing inside the job. The key still ends in event_id (dedup unchanged).
-- Rebuilt by copy and an atomic EXCHANGE; a re-run after a crash copies again, and the copies
-- collapse on the same key.

CREATE TABLE IF NOT EXISTS {db}.spans__0006 AS {db}.spans
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, rank, event_id);

INSERT INTO {db}.spans__0006 SELECT * FROM {db}.spans;

EXCHANGE TABLES {db}.spans AND {db}.spans__0006;

DROP TABLE {db}.spans__0006;

CREATE TABLE IF NOT EXISTS {db}.gpu_samples__0006 AS {db}.gpu_samples
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, rank, event_id);

INSERT INTO {db}.gpu_samples__0006 SELECT * FROM {db}.gpu_samples;

EXCHANGE TABLES {db}.gpu_samples AND {db}.gpu_samples__0006;

DROP TABLE {db}.gpu_samples__0006;
