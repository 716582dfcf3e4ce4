-- rankscope 0015: reference baselines (issue 19), from the compacted <p>.baselines topic.
-- One row per recorded baseline; the latest per model/config key is the reference
-- (`baseline list` reads argMax by recorded_ts). The profile is kept whole as JSON (the record
-- on the topic), its headline figures as columns for queries and dashboards.

CREATE TABLE IF NOT EXISTS {db}.baselines
(
    baseline_id     String,
    name            String,
    key             String,
    recorded_ts_ns  Int64,
    recorded_ts     DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(recorded_ts_ns),
    recorded_by     String,
    cluster         LowCardinality(String),
    job_id          String,
    model           String,
    ranks           UInt32,
    steps           UInt32,
    step_s          Float64,
    comm_share      Float64,
    power_w_per_gpu Nullable(Float64),
    samples_per_s   Nullable(Float64),
    tokens_per_s    Nullable(Float64),
    driver_version  LowCardinality(String),
    nccl_version    LowCardinality(String),
    cuda_version    LowCardinality(String),
    kernel          LowCardinality(String),
    nccl_env        Map(String, String),
    profile_json    String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY (name, baseline_id);
