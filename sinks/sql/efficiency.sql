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
    steps AS (
        SELECT cluster, job_id, node, rank, step, start_ns, end_ns, status,
            attributes['rankscope.samples'] AS samples, attributes['rankscope.tokens'] AS tokens,
            attributes['rankscope.model'] AS model
        FROM {db:Identifier}.spans FINAL
        WHERE phase = 'step'
            AND ({job_id:String} = '' OR job_id = {job_id:String})
            AND ({hours:UInt32} = 0 OR ts >= now64(9) - toIntervalHour({hours:UInt32}))
    ),
    work AS (
        SELECT cluster, job_id, sum(s) AS samples, sum(t) AS tokens
        FROM (
            SELECT cluster, job_id, step,
                max(toFloat64OrZero(samples)) AS s, max(toFloat64OrZero(tokens)) AS t
            FROM steps WHERE status = 'ok' GROUP BY cluster, job_id, step
        )
        GROUP BY cluster, job_id
    ),
    jobs AS (
        SELECT cluster, job_id, uniqExact(rank) AS ranks, min(start_ns) AS t0, max(end_ns) AS t1,
            anyIf(model, model != '') AS model, groupUniqArray(node) AS nodes
        FROM steps GROUP BY cluster, job_id
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
    energy AS (
        SELECT cluster, job_id, sum(rise_mj) / 1000 AS energy_j
        FROM (
            SELECT g.cluster AS cluster, g.job_id AS job_id, g.node, g.gpu,
                max(g.energy_mj) - min(g.energy_mj) AS rise_mj
            FROM {db:Identifier}.gpu_samples AS g FINAL
            INNER JOIN jobs AS j ON g.cluster = j.cluster AND g.job_id = j.job_id
            WHERE g.job_id IN (SELECT job_id FROM jobs) AND g.energy_mj IS NOT NULL
                AND g.ts_ns >= j.t0 AND g.ts_ns <= j.t1
            GROUP BY cluster, job_id, g.node, g.gpu
        )
        GROUP BY cluster, job_id
    ),
    per_job AS (
        SELECT j.cluster AS cluster, j.job_id AS job_id, j.model AS model,
            n.gpu_model AS gpu_model, j.ranks AS ranks,
            j.ranks * (j.t1 - j.t0) / 1e9 AS gpu_s, w.samples AS samples, w.tokens AS tokens,
            e.energy_j AS energy_j
        FROM jobs AS j
        LEFT JOIN work AS w ON j.cluster = w.cluster AND j.job_id = w.job_id
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
