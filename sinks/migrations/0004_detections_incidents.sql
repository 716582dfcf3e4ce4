-- rankscope 0004: what the detectors find (issue 4).

CREATE TABLE IF NOT EXISTS {db}.detections
(
    detection_id    String,
    detection_type  LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    rank            Int32,
    gpu             Int16,
    straggler_class LowCardinality(String),
    score           Float64,
    onset_ts_ns     Int64,
    detected_ts_ns  Int64,
    emitted_ts_ns   Int64,
    onset_ts        DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(onset_ts_ns),
    summary         String,
    evidence        Array(String),
    details         Map(String, String),
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(onset_ts)
ORDER BY (job_id, detection_type, detection_id);

CREATE TABLE IF NOT EXISTS {db}.incidents
(
    incident_id          String,
    revision             UInt32,
    cluster              LowCardinality(String),
    job_id               LowCardinality(String),
    cause_class          LowCardinality(String),
    node                 LowCardinality(String),
    gpu                  Int16,
    rank                 Int32,
    device               String,
    xid                  Nullable(UInt32),
    confidence           Float64,
    summary              String,
    first_cause_ts_ns    Int64,
    first_symptom_ts_ns  Int64,
    attributed_ts_ns     Int64,
    emitted_ts_ns        Int64,
    first_cause_ts       DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(first_cause_ts_ns),
    symptom_ranks        Array(Int32),
    evidence_json        String,
    clock_offsets_ns     Map(String, Int64),
    ingested_at          DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(revision)  -- the latest revision of an incident wins
PARTITION BY toDate(first_cause_ts)
ORDER BY (job_id, incident_id);
