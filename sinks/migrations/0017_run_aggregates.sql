-- rankscope 0017: per-job, per-minute facts of step/checkpoint spans and of GPU energy counters,
-- kept as data arrives (issue 19): the run and efficiency queries read these small tables
-- instead of scanning spans and samples, and read raw rows only for the minutes that straddle
-- an attempt's start, end or last checkpoint (a requeued Slurm job keeps its id, so time tells
-- attempts apart and a minute can hold two).
-- Every state is min, max, a set union or a per-step max: idempotent, so a batch the sink
-- re-delivers (at-least-once; spans and gpu_samples dedupe only under FINAL) or a replay that
-- writes rows again leaves the results exact. Rows grow with jobs x minutes, not with samples.
-- min_start/max_start/min_end/max_end (spans) and min_ts/max_ts (samples) say whether a whole
-- minute lies inside an attempt; only minutes that do not are read raw.

CREATE TABLE IF NOT EXISTS {db}.run_span_minute
(
    cluster       LowCardinality(String),
    job_id        LowCardinality(String),
    minute        DateTime('UTC'),
    min_start     SimpleAggregateFunction(min, Int64),
    max_start     SimpleAggregateFunction(max, Int64),
    min_end       SimpleAggregateFunction(min, Int64),
    max_end       SimpleAggregateFunction(max, Int64),
    step_ranks    SimpleAggregateFunction(groupUniqArrayArray, Array(Int32)),
    first_step    SimpleAggregateFunction(min, Nullable(Int64)),
    last_ok_step  SimpleAggregateFunction(max, Nullable(Int64)),
    ckpt_step     SimpleAggregateFunction(max, Nullable(Int64)),
    ckpt_end_ns   SimpleAggregateFunction(max, Nullable(Int64)),
    step_start    SimpleAggregateFunction(min, Nullable(Int64)),
    step_end      SimpleAggregateFunction(max, Nullable(Int64)),
    step_nodes    SimpleAggregateFunction(groupUniqArrayArray, Array(String)),
    model         SimpleAggregateFunction(max, String),
    step_samples  SimpleAggregateFunction(maxMap, Tuple(Array(Int64), Array(Float64))),
    step_tokens   SimpleAggregateFunction(maxMap, Tuple(Array(Int64), Array(Float64)))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (job_id, minute, cluster);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.run_span_minute_mv TO {db}.run_span_minute AS
SELECT cluster, job_id, toStartOfMinute(ts) AS minute,
    min(start_ns) AS min_start, max(start_ns) AS max_start,
    min(end_ns) AS min_end, max(end_ns) AS max_end,
    groupUniqArrayIf(rank, phase = 'step') AS step_ranks,
    minIf(toNullable(step), phase = 'step' AND step >= 0) AS first_step,
    maxIf(toNullable(step), phase = 'step' AND status = 'ok' AND step >= 0) AS last_ok_step,
    maxIf(toNullable(step), phase = 'checkpoint' AND status != 'error' AND step >= 0)
        AS ckpt_step,
    maxIf(toNullable(end_ns), phase = 'checkpoint' AND status != 'error' AND step >= 0)
        AS ckpt_end_ns,
    minIf(toNullable(start_ns), phase = 'step') AS step_start,
    maxIf(toNullable(end_ns), phase = 'step') AS step_end,
    groupUniqArrayIf(toString(node), phase = 'step') AS step_nodes,
    maxIf(attributes['rankscope.model'], phase = 'step') AS model,
    maxMapIf(([step], [toFloat64OrZero(attributes['rankscope.samples'])]),
        phase = 'step' AND status = 'ok') AS step_samples,
    maxMapIf(([step], [toFloat64OrZero(attributes['rankscope.tokens'])]),
        phase = 'step' AND status = 'ok') AS step_tokens
FROM {db}.spans
WHERE phase IN ('step', 'checkpoint')
GROUP BY cluster, job_id, minute;

INSERT INTO {db}.run_span_minute
SELECT cluster, job_id, toStartOfMinute(ts) AS minute,
    min(start_ns), max(start_ns), min(end_ns), max(end_ns),
    groupUniqArrayIf(rank, phase = 'step'),
    minIf(toNullable(step), phase = 'step' AND step >= 0),
    maxIf(toNullable(step), phase = 'step' AND status = 'ok' AND step >= 0),
    maxIf(toNullable(step), phase = 'checkpoint' AND status != 'error' AND step >= 0),
    maxIf(toNullable(end_ns), phase = 'checkpoint' AND status != 'error' AND step >= 0),
    minIf(toNullable(start_ns), phase = 'step'),
    maxIf(toNullable(end_ns), phase = 'step'),
    groupUniqArrayIf(toString(node), phase = 'step'),
    maxIf(attributes['rankscope.model'], phase = 'step'),
    maxMapIf(([step], [toFloat64OrZero(attributes['rankscope.samples'])]),
        phase = 'step' AND status = 'ok'),
    maxMapIf(([step], [toFloat64OrZero(attributes['rankscope.tokens'])]),
        phase = 'step' AND status = 'ok')
FROM {db}.spans FINAL
WHERE phase IN ('step', 'checkpoint')
GROUP BY cluster, job_id, minute;

-- Per GPU and minute: the first and last sample time and the energy counter's lowest and highest
-- reading (NVML's counter only rises, so a window's rise is its max - min).
CREATE TABLE IF NOT EXISTS {db}.run_energy_minute
(
    cluster  LowCardinality(String),
    job_id   LowCardinality(String),
    node     LowCardinality(String),
    gpu      Int16,
    minute   DateTime('UTC'),
    min_ts   SimpleAggregateFunction(min, Int64),
    max_ts   SimpleAggregateFunction(max, Int64),
    e_min    SimpleAggregateFunction(min, UInt64),
    e_max    SimpleAggregateFunction(max, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (job_id, minute, cluster, node, gpu);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.run_energy_minute_mv TO {db}.run_energy_minute AS
SELECT cluster, job_id, node, gpu, toStartOfMinute(ts) AS minute,
    min(ts_ns) AS min_ts, max(ts_ns) AS max_ts,
    min(assumeNotNull(energy_mj)) AS e_min, max(assumeNotNull(energy_mj)) AS e_max
FROM {db}.gpu_samples
WHERE energy_mj IS NOT NULL
GROUP BY cluster, job_id, node, gpu, minute;

INSERT INTO {db}.run_energy_minute
SELECT cluster, job_id, node, gpu, toStartOfMinute(ts) AS minute,
    min(ts_ns), max(ts_ns), min(assumeNotNull(energy_mj)), max(assumeNotNull(energy_mj))
FROM {db}.gpu_samples FINAL
WHERE energy_mj IS NOT NULL
GROUP BY cluster, job_id, node, gpu, minute;

-- Attempts the training code names (issue 19): the OTel resource attributes rankscope.run_id and
-- rankscope.attempt ride on every span; per (job, run, attempt) the first span start and the
-- last span end. Min/max again, so re-delivery is harmless; one row per attempt, not per span.
CREATE TABLE IF NOT EXISTS {db}.run_span_attempt
(
    cluster    LowCardinality(String),
    job_id     LowCardinality(String),
    run_id     LowCardinality(String),
    attempt    UInt32,
    min_start  SimpleAggregateFunction(min, Int64),
    max_end    SimpleAggregateFunction(max, Int64)
)
ENGINE = AggregatingMergeTree
ORDER BY (cluster, job_id, run_id, attempt);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.run_span_attempt_mv TO {db}.run_span_attempt AS
SELECT cluster, job_id, attributes['rankscope.run_id'] AS run_id,
    toUInt32OrZero(attributes['rankscope.attempt']) AS attempt,
    min(start_ns) AS min_start, max(end_ns) AS max_end
FROM {db}.spans
WHERE attributes['rankscope.run_id'] != '' AND toUInt32OrZero(attributes['rankscope.attempt']) > 0
GROUP BY cluster, job_id, run_id, attempt;

INSERT INTO {db}.run_span_attempt
SELECT cluster, job_id, attributes['rankscope.run_id'] AS run_id,
    toUInt32OrZero(attributes['rankscope.attempt']) AS attempt, min(start_ns), max(end_ns)
FROM {db}.spans FINAL
WHERE attributes['rankscope.run_id'] != '' AND toUInt32OrZero(attributes['rankscope.attempt']) > 0
GROUP BY cluster, job_id, run_id, attempt;

-- job_attempts, now from two sources. Precedence per job: a scheduler run id that is not the
-- job id (the operator's mapping or pattern, or the scheduler's own link: requeue, dependency,
-- array, training-operator job) > the training code's rankscope.run_id / rankscope.attempt > the
-- scheduler's fallback (run id = job id). A training-code attempt starts at its first span and
-- ends at the job's first end event after that start (0: none yet); its outcome is that event's.
CREATE OR REPLACE VIEW {db}.job_attempts AS
SELECT cluster, run_id, job_id, attempt, start_ns, end_ns, outcome, event_types
FROM (
    SELECT
        cluster,
        run_id,
        job_id,
        attempt,
        if(countIf(event_type = 'job_started') > 0, minIf(ts_ns, event_type = 'job_started'),
            min(ts_ns)) AS start_ns,
        maxIf(ts_ns, event_type IN ('job_completed', 'job_failed', 'job_requeued',
            'job_cancelled', 'job_timeout', 'preempted', 'oom_killed')) AS end_ns,
        -- at one time a requeue gives way to its cause (Slurm: preempted, then requeued)
        argMaxIf(event_type, (ts_ns, event_type != 'job_requeued'), event_type IN (
            'job_completed', 'job_failed', 'job_requeued', 'job_cancelled', 'job_timeout',
            'preempted', 'oom_killed')) AS outcome,
        groupUniqArray(event_type) AS event_types
    FROM {db}.scheduler_events FINAL
    WHERE run_id != '' AND attempt > 0
        AND (run_id != job_id OR (cluster, job_id) NOT IN (
            SELECT cluster, job_id FROM {db}.run_span_attempt))
    GROUP BY cluster, run_id, job_id, attempt
)
UNION ALL
SELECT t.cluster AS cluster, t.run_id AS run_id, t.job_id AS job_id, t.attempt AS attempt,
    t.start_ns AS start_ns, e.end_ns AS end_ns, e.outcome AS outcome,
    e.event_types AS event_types
FROM (
    SELECT cluster, job_id, run_id, attempt, min(min_start) AS start_ns
    FROM {db}.run_span_attempt
    WHERE (cluster, job_id) NOT IN (SELECT cluster, job_id FROM {db}.scheduler_events
        WHERE run_id != '' AND run_id != job_id)
    GROUP BY cluster, job_id, run_id, attempt
) AS t
ASOF LEFT JOIN (
    SELECT cluster, job_id, ts_ns AS end_ns,
        argMax(event_type, event_type != 'job_requeued') AS outcome,
        groupUniqArray(event_type) AS event_types
    FROM {db}.scheduler_events FINAL
    WHERE event_type IN ('job_completed', 'job_failed', 'job_requeued', 'job_cancelled',
        'job_timeout', 'preempted', 'oom_killed')
    GROUP BY cluster, job_id, ts_ns
) AS e ON t.cluster = e.cluster AND t.job_id = e.job_id AND t.start_ns <= e.end_ns;

-- the run_attempts view (0014) holds the query's text as it was when created: renew it
CREATE OR REPLACE VIEW {db}.run_attempts AS {named:run_attempts};
