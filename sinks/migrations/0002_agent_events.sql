-- rankscope 0002: node-agent event families (fabric, communication logs, inventory, agent).

CREATE TABLE IF NOT EXISTS {db}.fabric_counters
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
    device          LowCardinality(String),
    port            UInt16,
    link_layer      LowCardinality(String),
    state           LowCardinality(String),
    phys_state      LowCardinality(String),
    rate            LowCardinality(String),
    counters        Map(LowCardinality(String), Int64),
    rates_per_s     Map(LowCardinality(String), Float64),
    interval_s      Nullable(Float64),
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (cluster, node, device, port, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.fabric_events
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
    event_type      LowCardinality(String),
    device          LowCardinality(String),
    port            Nullable(UInt16),
    counter         LowCardinality(String),
    delta           Nullable(Int64),
    old_state       LowCardinality(String),
    new_state       LowCardinality(String),
    message         String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (cluster, node, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.comm_events
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
    op              LowCardinality(String),
    seq             Nullable(UInt64),
    peer_rank       Nullable(Int32),
    peer            String,
    timeout_ms      Nullable(UInt64),
    elapsed_ms      Nullable(UInt64),
    process_group   LowCardinality(String),
    pid             Nullable(UInt32),
    log_file        String,
    message         String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.node_inventory
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
    driver_version  LowCardinality(String),
    cuda_version    LowCardinality(String),
    nccl_version    LowCardinality(String),
    kernel          LowCardinality(String),
    os              LowCardinality(String),
    gpu_model       LowCardinality(String),
    gpu_count       UInt16,
    gpu_vbios       Map(String, String),
    hca_firmware    Map(String, String),
    extra           Map(String, String),
    fingerprint     String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (cluster, node, ts, event_id);

CREATE TABLE IF NOT EXISTS {db}.agent_events
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
    event_type      LowCardinality(String),
    agent           LowCardinality(String),
    collector       LowCardinality(String),
    count           UInt64,
    message         String,
    ingested_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (cluster, node, ts, event_id);
