-- rankscope 0005: what redaction found (counts, never values) and what it quarantined (issue 5).

CREATE TABLE IF NOT EXISTS {db}.redaction_audit
(
    audit_id        String,
    window_start_ns Int64,
    window_start    DateTime('UTC') DEFAULT toDateTime(intDiv(window_start_ns, 1000000000), 'UTC'),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    kind            LowCardinality(String),
    field           LowCardinality(String),
    entity          LowCardinality(String),
    rule            LowCardinality(String),
    action          LowCardinality(String),
    count           UInt64,
    rules_version   LowCardinality(String),
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(window_start)
ORDER BY (window_start, kind, field, entity, audit_id);

CREATE TABLE IF NOT EXISTS {db}.redaction_quarantine
(
    quarantine_id   String,
    reason_code     LowCardinality(String),
    reason          String,
    fields_removed  Array(String),
    rules_version   LowCardinality(String),
    source_topic    LowCardinality(String),
    partition       Int32,
    offset          Int64,
    quarantined_ts_ns Int64,
    event_id        String,
    schema          LowCardinality(String),
    kind            LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    ts_ns           Int64,
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    event_json      String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, quarantine_id);
