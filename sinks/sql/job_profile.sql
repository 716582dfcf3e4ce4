-- name: job_profile
-- summary: A job's throughput profile: per phase, the median and spread (IQR) over steps of the per-step median over ranks.
-- The statistic the stream's baseline comparison computes (streams/analysis/baseline.py): per
-- (step, rank) each phase's time (the phases' sum is the rank's step time, row "step"), per step
-- the median over ranks, then over steps the median and the interquartile range. The first
-- skip_steps steps (warm-up) are left out; a rank's step counts only with its collective.
-- param: job_id String  the job
-- param: skip_steps UInt32 = 2  warm-up steps left out
WITH
    per_rank AS (
        SELECT step, rank, phase, sum(end_ns - start_ns) / 1e9 AS s
        FROM {db:Identifier}.spans FINAL
        WHERE job_id = {job_id:String} AND step >= 0 AND rank >= 0
            AND phase IN ('data', 'forward', 'backward', 'optimizer', 'collective')
        GROUP BY step, rank, phase
    ),
    complete AS (
        SELECT step, rank FROM per_rank GROUP BY step, rank HAVING countIf(phase = 'collective') > 0
    ),
    (SELECT min(step) FROM per_rank) AS first_step,
    kept AS (
        SELECT step, rank, phase, s FROM per_rank
        WHERE (step, rank) IN (SELECT step, rank FROM complete)
            AND step >= first_step + {skip_steps:UInt32}
    ),
    with_step AS (
        SELECT step, rank, phase, s FROM kept
        UNION ALL
        SELECT step, rank, 'step' AS phase, sum(s) AS s FROM kept GROUP BY step, rank
    ),
    per_step AS (
        SELECT step, phase, quantileExactInclusive(0.5)(s) AS s, count() AS ranks
        FROM with_step GROUP BY step, phase
    )
SELECT
    phase,
    count() AS steps,
    max(ranks) AS ranks,
    quantileExactInclusive(0.5)(s) AS median_s,
    quantileExactInclusive(0.75)(s) - quantileExactInclusive(0.25)(s) AS spread_s
FROM per_step
GROUP BY phase
ORDER BY indexOf(['data', 'forward', 'backward', 'optimizer', 'collective', 'step'], phase)
