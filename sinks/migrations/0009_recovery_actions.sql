-- rankscope 0009: automated recovery as events (issue 7): every decision, suppression and
-- outcome, one row per (idempotency key, stage).

CREATE TABLE IF NOT EXISTS {db}.recovery_actions
(
    key             String,
    stage           LowCardinality(String),
    action          LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    rank            Int32,
    rule            LowCardinality(String),
    reason          String,
    trigger_id      String,
    attempt         UInt32,
    ts_ns           Int64,
    not_before_ts_ns Int64,
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, key, stage)
