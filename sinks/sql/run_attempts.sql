-- name: run_attempts
-- summary: Every attempt of a run: GPU-hours, energy, the steps it saved and what it lost.
-- Attempts come from the job_attempts view (scheduler events carrying run_id and attempt); an
-- attempt's spans and GPU samples are its job's between the attempt's start and end (a Slurm
-- requeue keeps the job id, so time tells the attempts apart).
--   gpu_hours         ranks x (end - start), the allocation, as goodput counts it
--   energy_j          the rise of each GPU's NVML energy counter within the attempt
--   saved_step        the last step of the attempt's last good checkpoint span (phase
--                     'checkpoint', step = the step saved); none: the step it resumed after
--   recomputed_steps  steps done after saved_step, redone by the next attempt (0 if completed)
--   lost_gpu_hours    an attempt that did not complete: ranks x (end - end of its last
--                     checkpoint, or start): the unsaved work, the failure and the teardown
--   lost_energy_j     the energy counters' rise over the same stretch
--   cause_class       the attempt's first incident's cause class; else from the scheduler
--                     (preempted: scheduler_preemption, oom_killed: host_oom), else unknown
-- param: run_id String = ''  one run (empty: every run)
-- param: hours UInt32 = 0  runs with an attempt that started in the last hours (0: all)
WITH
    -- ClickHouse inlines a CTE at every reference and the queries below refer to the attempts
    -- and their facts many times; a scalar subquery is evaluated once per query, so both are
    -- collected into arrays once and unpacked where used
    (
        SELECT groupArray((cluster, run_id, job_id, attempt, start_ns, end_ns, outcome,
            event_types))
        FROM (
        SELECT cluster, run_id, job_id, attempt, start_ns, end_ns, outcome, event_types
        FROM (
            SELECT *, max(start_ns) OVER (PARTITION BY cluster, run_id) AS run_last_start_ns
            FROM {db:Identifier}.job_attempts
            WHERE {run_id:String} = '' OR run_id = {run_id:String}
        )
        WHERE {hours:UInt32} = 0
            OR run_last_start_ns >= toUnixTimestamp64Nano(now64(9)) - {hours:UInt32} * 3600000000000
        )
    ) AS attempt_list,
    attempts AS (
        SELECT a.1 AS cluster, a.2 AS run_id, a.3 AS job_id, a.4 AS attempt, a.5 AS start_ns,
            a.6 AS end_ns, a.7 AS outcome, a.8 AS event_types
        FROM (SELECT arrayJoin(attempt_list) AS a)
    ),
    span_minutes AS (
        SELECT a.cluster AS cluster, a.run_id AS run_id, a.job_id AS job_id,
            a.attempt AS attempt, b.minute AS minute, b.step_ranks AS step_ranks,
            b.first_step AS first_step, b.last_ok_step AS last_ok_step,
            b.ckpt_step AS ckpt_step, b.ckpt_end_ns AS ckpt_end_ns, b.max_end AS last_end_ns,
            b.min_start >= a.start_ns AND (a.end_ns = 0 OR b.max_end <= a.end_ns) AS whole
        FROM (
            SELECT cluster, job_id, minute, min(min_start) AS min_start,
                max(max_start) AS max_start, min(min_end) AS min_end, max(max_end) AS max_end,
                groupUniqArrayArray(step_ranks) AS step_ranks, min(first_step) AS first_step,
                max(last_ok_step) AS last_ok_step, max(ckpt_step) AS ckpt_step,
                max(ckpt_end_ns) AS ckpt_end_ns
            FROM {db:Identifier}.run_span_minute
            WHERE job_id IN (SELECT job_id FROM attempts)
            GROUP BY cluster, job_id, minute
        ) AS b
        INNER JOIN attempts AS a ON b.cluster = a.cluster AND b.job_id = a.job_id
        WHERE b.max_start >= a.start_ns AND (a.end_ns = 0 OR b.min_end <= a.end_ns)
    ),
    -- whole minutes from the aggregate; minutes that straddle the attempt's start or end from
    -- the spans themselves (all states are min/max/union, so a minute seen twice is harmless)
    span_parts AS (
        SELECT cluster, run_id, job_id, attempt, step_ranks AS p_ranks,
            first_step AS p_first, last_ok_step AS p_last, ckpt_step AS p_ckpt,
            ckpt_end_ns AS p_ckpt_end, last_end_ns AS p_end
        FROM span_minutes WHERE whole
        UNION ALL
        SELECT a.cluster, a.run_id, a.job_id, a.attempt,
            groupUniqArrayIf(s.rank, s.phase = 'step'),
            minIf(toNullable(s.step), s.phase = 'step' AND s.step >= 0),
            maxIf(toNullable(s.step), s.phase = 'step' AND s.status = 'ok' AND s.step >= 0),
            maxIf(toNullable(s.step), s.phase = 'checkpoint' AND s.status != 'error'
                AND s.step >= 0),
            maxIf(toNullable(s.end_ns), s.phase = 'checkpoint' AND s.status != 'error'
                AND s.step >= 0),
            max(s.end_ns)
        FROM {db:Identifier}.spans AS s FINAL
        INNER JOIN attempts AS a ON s.cluster = a.cluster AND s.job_id = a.job_id
        WHERE (s.job_id, toStartOfMinute(s.ts)) IN (
                SELECT job_id, minute FROM span_minutes WHERE NOT whole)
            AND s.phase IN ('step', 'checkpoint')
            AND s.start_ns >= a.start_ns AND (a.end_ns = 0 OR s.end_ns <= a.end_ns)
        GROUP BY a.cluster, a.run_id, a.job_id, a.attempt
    ),
    span_facts AS (
        SELECT cluster, run_id, job_id, attempt,
            length(groupUniqArrayArray(p_ranks)) AS ranks,
            coalesce(min(p_first), 0) AS first_step,
            coalesce(max(p_last), 0) AS last_step,
            max(p_ckpt) IS NOT NULL AS ckpts,
            coalesce(max(p_ckpt), 0) AS ckpt_step,
            coalesce(max(p_ckpt_end), 0) AS ckpt_end_ns,
            max(p_end) AS last_end_ns
        FROM span_parts
        GROUP BY cluster, run_id, job_id, attempt
    ),
    facts_query AS (
        SELECT a.cluster AS cluster, a.run_id AS run_id, a.job_id AS job_id,
            a.attempt AS attempt, a.outcome AS outcome, a.event_types AS event_types,
            a.start_ns AS start_ns,
            if(a.end_ns = 0, f.last_end_ns, a.end_ns) AS end_ns,
            f.ranks AS ranks, f.first_step AS first_step, f.last_step AS last_step,
            if(f.ckpts > 0, f.ckpt_step, f.first_step - 1) AS saved_step,
            if(f.ckpts > 0, f.ckpt_end_ns, a.start_ns) AS saved_until_ns,
            a.outcome = 'job_completed' AS completed
        FROM attempts AS a
        LEFT JOIN span_facts AS f
            ON a.cluster = f.cluster AND a.run_id = f.run_id AND a.job_id = f.job_id
                AND a.attempt = f.attempt
    ),
    (
        SELECT groupArray((cluster, run_id, job_id, attempt, outcome, event_types, start_ns,
            end_ns, ranks, first_step, last_step, saved_step, saved_until_ns, completed))
        FROM facts_query
    ) AS fact_list,
    facts AS (
        SELECT f.1 AS cluster, f.2 AS run_id, f.3 AS job_id, f.4 AS attempt, f.5 AS outcome,
            f.6 AS event_types, f.7 AS start_ns, f.8 AS end_ns, f.9 AS ranks,
            f.10 AS first_step, f.11 AS last_step, f.12 AS saved_step, f.13 AS saved_until_ns,
            f.14 AS completed
        FROM (SELECT arrayJoin(fact_list) AS f)
    ),
    energy_minutes AS (
        SELECT x.cluster AS cluster, x.run_id AS run_id, x.job_id AS job_id,
            x.attempt AS attempt, x.completed AS completed, b.node AS node, b.gpu AS gpu,
            b.minute AS minute, b.e_min AS e_min, b.e_max AS e_max,
            if(b.min_ts >= x.saved_until_ns, b.e_min, NULL) AS e_lost_min,
            b.min_ts >= x.start_ns AND b.max_ts <= x.end_ns
                AND NOT (b.min_ts < x.saved_until_ns AND b.max_ts >= x.saved_until_ns) AS whole
        FROM (
            SELECT cluster, job_id, node, gpu, minute, min(min_ts) AS min_ts,
                max(max_ts) AS max_ts, min(e_min) AS e_min, max(e_max) AS e_max
            FROM {db:Identifier}.run_energy_minute
            WHERE job_id IN (SELECT job_id FROM attempts)
            GROUP BY cluster, job_id, node, gpu, minute
        ) AS b
        INNER JOIN facts AS x ON b.cluster = x.cluster AND b.job_id = x.job_id
        WHERE b.max_ts >= x.start_ns AND b.min_ts <= x.end_ns
    ),
    -- whole minutes from the aggregate; minutes that straddle the attempt's start, end or last
    -- checkpoint from the samples themselves (a minute not whole holds one of those instants,
    -- so the raw minutes are known without reading the aggregate twice)
    energy_parts AS (
        SELECT cluster, run_id, attempt, completed, node, gpu, e_min, e_max, e_lost_min
        FROM energy_minutes WHERE whole
        UNION ALL
        SELECT x.cluster, x.run_id, x.attempt, x.completed, g.node, g.gpu,
            assumeNotNull(g.energy_mj), assumeNotNull(g.energy_mj),
            if(g.ts_ns >= x.saved_until_ns, assumeNotNull(g.energy_mj), NULL)
        FROM {db:Identifier}.gpu_samples AS g FINAL
        INNER JOIN facts AS x ON g.cluster = x.cluster AND g.job_id = x.job_id
        WHERE (g.job_id, toStartOfMinute(g.ts)) IN (
                SELECT job_id, arrayJoin(arrayMap(t -> toStartOfMinute(fromUnixTimestamp64Nano(t)),
                    [start_ns, end_ns, saved_until_ns]))
                FROM facts)
            AND g.energy_mj IS NOT NULL
            AND g.ts_ns >= x.start_ns AND g.ts_ns <= x.end_ns
    ),
    energy AS (
        SELECT cluster, run_id, attempt,
            sum(rise_mj) / 1000 AS energy_j, sum(lost_mj) / 1000 AS lost_energy_j
        FROM (
            SELECT cluster, run_id, attempt, node, gpu,
                max(e_max) - min(e_min) AS rise_mj,
                if(any(completed), 0, max(e_max) - min(e_lost_min)) AS lost_mj
            FROM energy_parts
            GROUP BY cluster, run_id, attempt, node, gpu
        )
        GROUP BY cluster, run_id, attempt
    ),
    causes AS (
        SELECT x.cluster AS cluster, x.run_id AS run_id, x.attempt AS attempt,
            argMin(i.cause_class, i.first_cause_ts_ns) AS cause_class
        FROM {db:Identifier}.incidents AS i FINAL
        INNER JOIN attempts AS x ON i.cluster = x.cluster AND i.job_id = x.job_id
        WHERE i.job_id IN (SELECT job_id FROM attempts)
            AND i.first_cause_ts_ns >= x.start_ns
            AND (x.end_ns = 0 OR i.first_cause_ts_ns <= x.end_ns)
        GROUP BY cluster, run_id, attempt
    )
SELECT
    x.cluster AS cluster,
    x.run_id AS run_id,
    x.job_id AS job_id,
    x.attempt AS attempt,
    x.outcome AS outcome,
    x.start_ns AS start_ns,
    x.end_ns AS end_ns,
    x.ranks AS ranks,
    x.ranks * (x.end_ns - x.start_ns) / 3.6e12 AS gpu_hours,
    coalesce(e.energy_j, 0) AS energy_j,
    x.first_step AS first_step,
    x.last_step AS last_step,
    x.saved_step AS saved_step,
    if(x.completed, 0, greatest(x.last_step - x.saved_step, 0)) AS recomputed_steps,
    if(x.completed, 0, x.ranks * (x.end_ns - greatest(x.saved_until_ns, x.start_ns)) / 3.6e12)
        AS lost_gpu_hours,
    coalesce(e.lost_energy_j, 0) AS lost_energy_j,
    if(x.completed, '',
        multiIf(c.cause_class != '', c.cause_class,
            has(x.event_types, 'preempted'), 'scheduler_preemption',
            has(x.event_types, 'oom_killed'), 'host_oom', 'unknown')) AS cause_class
FROM facts AS x
LEFT JOIN energy AS e ON x.cluster = e.cluster AND x.run_id = e.run_id AND x.attempt = e.attempt
LEFT JOIN causes AS c ON x.cluster = c.cluster AND x.run_id = c.run_id AND x.attempt = c.attempt
ORDER BY cluster, run_id, attempt
