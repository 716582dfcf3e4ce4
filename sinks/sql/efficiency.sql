-- name: efficiency
-- summary: Training throughput per GPU, per joule (= per W) and per dollar, by job, model or GPU model.
-- Throughput comes from the ok step spans' attributes rankscope.samples and rankscope.tokens: the
-- step's global batch (samples, tokens); any rank may set them, a step counts once (its largest
-- value over ranks). Model: the spans' rankscope.model (a resource attribute). GPU model: the
-- latest node_inventory of the job's nodes ('mixed' when they differ). GPU time: ranks x (last
-- step end - first step start); energy: the NVML energy counters' rise over that time, so per
-- joule is also per watt (samples/s per W = samples per J). Per dollar: GPU-hours x
-- price_per_gpu_hour (rankscope's setting; see docs/reference.md "Efficiency").
-- param: by String = 'job'  group by 'job', 'model' or 'gpu_model'
-- param: job_id String = ''  one job (empty: every job with step spans in the window)
-- param: hours UInt32 = 24  steps that ended in the last hours (0: all)
-- param: price_per_gpu_hour Float64  what one GPU-hour costs
WITH
    -- step facts: whole minutes from run_span_minute (migration 0017); with hours, the minute
    -- the window starts inside is read from the spans themselves
    step_parts AS (
        SELECT cluster, job_id, step_ranks AS p_ranks, step_start AS p_start, step_end AS p_end,
            step_nodes AS p_nodes, model AS p_model, step_samples AS p_samples,
            step_tokens AS p_tokens
        FROM {db:Identifier}.run_span_minute
        WHERE ({job_id:String} = '' OR job_id = {job_id:String})
            AND ({hours:UInt32} = 0 OR minute >= now64(9) - toIntervalHour({hours:UInt32}))
        UNION ALL
        SELECT cluster, job_id, groupUniqArray(rank), min(toNullable(start_ns)),
            max(toNullable(end_ns)), groupUniqArray(toString(node)),
            max(attributes['rankscope.model']),
            maxMapIf(([step], [toFloat64OrZero(attributes['rankscope.samples'])]),
                status = 'ok'),
            maxMapIf(([step], [toFloat64OrZero(attributes['rankscope.tokens'])]),
                status = 'ok')
        FROM {db:Identifier}.spans FINAL
        WHERE phase = 'step' AND {hours:UInt32} != 0
            AND ({job_id:String} = '' OR job_id = {job_id:String})
            AND ts >= now64(9) - toIntervalHour({hours:UInt32})
            AND ts < toStartOfMinute(now64(9) - toIntervalHour({hours:UInt32}))
                + toIntervalMinute(1)
        GROUP BY cluster, job_id
    ),
    jobs AS (
        SELECT cluster, job_id, length(groupUniqArrayArray(p_ranks)) AS ranks,
            assumeNotNull(min(p_start)) AS t0, assumeNotNull(max(p_end)) AS t1,
            max(p_model) AS model, groupUniqArrayArray(p_nodes) AS nodes,
            arraySum(maxMap(p_samples).2) AS samples, arraySum(maxMap(p_tokens).2) AS tokens
        FROM step_parts
        GROUP BY cluster, job_id
        HAVING ranks > 0
    ),
    inventory AS (
        SELECT cluster, node, argMax(gpu_model, ts_ns) AS gpu_model
        FROM {db:Identifier}.node_inventory FINAL
        WHERE node IN (SELECT arrayJoin(nodes) FROM jobs)
        GROUP BY cluster, node
    ),
    node_types AS (
        SELECT j.cluster AS cluster, j.job_id AS job_id,
            if(uniqExact(i.gpu_model) > 1, 'mixed', any(i.gpu_model)) AS gpu_model
        FROM (SELECT cluster, job_id, arrayJoin(nodes) AS node FROM jobs) AS j
        INNER JOIN inventory AS i ON j.cluster = i.cluster AND j.node = i.node
        GROUP BY cluster, job_id
    ),
    energy_minutes AS (
        SELECT b.cluster AS cluster, b.job_id AS job_id, b.node AS node, b.gpu AS gpu,
            b.minute AS minute, b.e_min AS e_min, b.e_max AS e_max,
            b.min_ts >= j.t0 AND b.max_ts <= j.t1 AS whole
        FROM (
            SELECT cluster, job_id, node, gpu, minute, min(min_ts) AS min_ts,
                max(max_ts) AS max_ts, min(e_min) AS e_min, max(e_max) AS e_max
            FROM {db:Identifier}.run_energy_minute
            WHERE job_id IN (SELECT job_id FROM jobs)
            GROUP BY cluster, job_id, node, gpu, minute
        ) AS b
        INNER JOIN jobs AS j ON b.cluster = j.cluster AND b.job_id = j.job_id
        WHERE b.max_ts >= j.t0 AND b.min_ts <= j.t1
    ),
    -- whole minutes from run_energy_minute; the minutes the job's first and last step cut
    -- through (the minutes holding t0 and t1) from the samples themselves
    energy_parts AS (
        SELECT cluster, job_id, node, gpu, e_min, e_max FROM energy_minutes WHERE whole
        UNION ALL
        SELECT g.cluster, g.job_id, g.node, g.gpu, assumeNotNull(g.energy_mj),
            assumeNotNull(g.energy_mj)
        FROM {db:Identifier}.gpu_samples AS g FINAL
        INNER JOIN jobs AS j ON g.cluster = j.cluster AND g.job_id = j.job_id
        WHERE (g.job_id, toStartOfMinute(g.ts)) IN (
                SELECT job_id, arrayJoin([toStartOfMinute(fromUnixTimestamp64Nano(t0)),
                    toStartOfMinute(fromUnixTimestamp64Nano(t1))])
                FROM jobs)
            AND g.energy_mj IS NOT NULL
            AND g.ts_ns >= j.t0 AND g.ts_ns <= j.t1
    ),
    energy AS (
        SELECT cluster, job_id, sum(rise_mj) / 1000 AS energy_j
        FROM (
            SELECT cluster, job_id, node, gpu, max(e_max) - min(e_min) AS rise_mj
            FROM energy_parts
            GROUP BY cluster, job_id, node, gpu
        )
        GROUP BY cluster, job_id
    ),
    per_job AS (
        SELECT j.cluster AS cluster, j.job_id AS job_id, j.model AS model,
            n.gpu_model AS gpu_model, j.ranks AS ranks,
            j.ranks * (j.t1 - j.t0) / 1e9 AS gpu_s, j.samples AS samples, j.tokens AS tokens,
            e.energy_j AS energy_j
        FROM jobs AS j
        LEFT JOIN node_types AS n ON j.cluster = n.cluster AND j.job_id = n.job_id
        LEFT JOIN energy AS e ON j.cluster = e.cluster AND j.job_id = e.job_id
    )
SELECT
    multiIf({by:String} = 'model', p.model, {by:String} = 'gpu_model', p.gpu_model, p.job_id)
        AS key,
    count() AS jobs,
    arrayStringConcat(arraySort(groupUniqArray(p.model)), ',') AS models,
    arrayStringConcat(arraySort(groupUniqArray(p.gpu_model)), ',') AS gpu_models,
    sum(p.ranks) AS gpus,
    round(sum(p.gpu_s) / 3600, 4) AS gpu_hours,
    round(sum(p.energy_j) / 3.6e6, 4) AS energy_kwh,
    sum(p.samples) AS samples,
    sum(p.tokens) AS tokens,
    round(sum(p.samples) / nullIf(sum(p.gpu_s), 0), 4) AS samples_per_s_per_gpu,
    round(sum(p.tokens) / nullIf(sum(p.gpu_s), 0), 2) AS tokens_per_s_per_gpu,
    round(sum(p.samples) / nullIf(sum(p.energy_j), 0), 6) AS samples_per_joule,
    round(sum(p.tokens) / nullIf(sum(p.energy_j), 0), 4) AS tokens_per_joule,
    round(sum(p.samples) / nullIf(sum(p.gpu_s) / 3600 * {price_per_gpu_hour:Float64}, 0), 2)
        AS samples_per_dollar,
    round(sum(p.tokens) / nullIf(sum(p.gpu_s) / 3600 * {price_per_gpu_hour:Float64}, 0), 1)
        AS tokens_per_dollar,
    round(sum(p.energy_j) / nullIf(sum(p.gpu_s), 0), 1) AS power_w_per_gpu
FROM per_job AS p
GROUP BY key
ORDER BY key
