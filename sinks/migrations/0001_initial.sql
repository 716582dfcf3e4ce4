-- rankscope 0001: raw event families, window aggregates, late events, dead letters.
-- ReplacingMergeTree collapses rows with the same sorting key. Every sorting key ends in the
-- event's identity (event_id, window id parts, or the dead letter's source position), so a
-- re-consumed batch adds no row that FINAL (or a GROUP BY on the id) can see twice.
-- Columns for "not applicable" use -1 / '' rather than Nullable so they can sit in ORDER BY.

CREATE TABLE IF NOT EXISTS {db}.spans
(
    event_id        String,
    schema          LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    rank            Int32,
    local_rank      Int16,
    gpu             Int16,
    ts_ns           Int64,
    observed_ts_ns  Int64,
    clock_offset_ns Nullable(Int64),
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    name            LowCardinality(String),
    phase           LowCardinality(String),
    trace_id        FixedString(32),
    span_id         FixedString(16),
    parent_span_id  String,
    start_ns        Int64,
    end_ns          Int64,
    duration_s      Float64 MATERIALIZED (end_ns - start_ns) / 1e9,
    step            Int64,
    status          LowCardinality(String),
    error_type      LowCardinality(String),
    error_message   String,
    attributes      Map(LowCardinality(String), String),
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, rank, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.gpu_samples
(
    event_id            String,
    schema              LowCardinality(String),
    cluster             LowCardinality(String),
    job_id              LowCardinality(String),
    node                LowCardinality(String),
    rank                Int32,
    local_rank          Int16,
    gpu                 Int16,
    ts_ns               Int64,
    observed_ts_ns      Int64,
    clock_offset_ns     Nullable(Int64),
    ts                  DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    gpu_uuid            LowCardinality(String),
    sm_util_pct         Float32,
    mem_util_pct        Nullable(Float32),
    mem_used_bytes      Nullable(UInt64),
    mem_total_bytes     Nullable(UInt64),
    sm_clock_mhz        Nullable(Float32),
    mem_clock_mhz       Nullable(Float32),
    power_w             Nullable(Float32),
    energy_mj           Nullable(UInt64),
    temperature_c       Nullable(Float32),
    throttle_reasons    Nullable(UInt64),
    pcie_replay_count   Nullable(UInt64),
    ecc_sbe_total       Nullable(UInt64),
    ecc_dbe_total       Nullable(UInt64),
    remapped_rows       Nullable(UInt64),
    nvlink_errors_total Nullable(UInt64),
    ingested_at         DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, rank, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.gpu_events
(
    event_id        String,
    schema          LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    rank            Int32,
    local_rank      Int16,
    gpu             Int16,
    ts_ns           Int64,
    observed_ts_ns  Int64,
    clock_offset_ns Nullable(Int64),
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    gpu_uuid        LowCardinality(String),
    event_type      LowCardinality(String),
    xid             Nullable(UInt32),
    count           UInt32,
    message         String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (cluster, node, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.heartbeats
(
    event_id        String,
    schema          LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    rank            Int32,
    local_rank      Int16,
    gpu             Int16,
    ts_ns           Int64,
    observed_ts_ns  Int64,
    clock_offset_ns Nullable(Int64),
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    agent           LowCardinality(String),
    agent_version   LowCardinality(String),
    seq             UInt64,
    interval_s      Float32,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (cluster, node, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.scheduler_events
(
    event_id        String,
    schema          LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    node            LowCardinality(String),
    rank            Int32,
    local_rank      Int16,
    gpu             Int16,
    ts_ns           Int64,
    observed_ts_ns  Int64,
    clock_offset_ns Nullable(Int64),
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    source          LowCardinality(String),
    event_type      LowCardinality(String),
    state           LowCardinality(String),
    reason          String,
    exit_code       Nullable(Int32),
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.rank_windows
(
    window_id          String,
    cluster            LowCardinality(String),
    job_id             LowCardinality(String),
    rank               Int32,
    node               LowCardinality(String),
    window_start_ns    Int64,
    window_end_ns      Int64,
    window_start       DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(window_start_ns),
    step_count         UInt32,
    step_time_mean_s   Nullable(Float64),
    step_time_max_s    Nullable(Float64),
    gpu_util_mean_pct  Nullable(Float64),
    gpu_sample_count   UInt32,
    event_count        UInt32,
    emitted_ts_ns      Int64,
    ingested_at        DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(window_start)
ORDER BY (job_id, window_start_ns, rank);

CREATE TABLE IF NOT EXISTS {db}.late_events
(
    event_id        String,
    kind            LowCardinality(String),
    cluster         LowCardinality(String),
    job_id          LowCardinality(String),
    rank            Int32,
    node            LowCardinality(String),
    ts_ns           Int64,
    ts              DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(ts_ns),
    window_start_ns Int64,
    watermark_ns    Int64,
    lateness_ns     Int64,
    received_ts_ns  Int64,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.deadletter
(
    dead_letter_id String,
    reason_code    LowCardinality(String),
    reason         String,
    source_topic   LowCardinality(String),
    partition      Int32,
    offset         Int64,
    index_in_batch Int32,
    size_bytes     UInt64,
    sha256         FixedString(64),
    received_ts_ns Int64,
    received_at    DateTime64(9, 'UTC') DEFAULT fromUnixTimestamp64Nano(received_ts_ns),
    record_ts_ns   Int64,
    event_id       String,
    schema         LowCardinality(String),
    kind           LowCardinality(String),
    job_id         LowCardinality(String),
    node           LowCardinality(String),
    ingested_at    DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(received_at)
ORDER BY (source_topic, partition, offset, index_in_batch);
