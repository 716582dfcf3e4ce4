-- name: goodput
-- summary: A job's GPU time split into productive time and time lost, in GPU-hours and money.
-- Per rank, from its step spans, between the job's first step start and last step end:
--   productive   ok steps, each up to the job's median step time
--   slow_steps   ok steps beyond the median (stragglers, jitter: everyone waits for the slowest)
--   failed       error steps before the rank's last good step, and everything after it (the
--                failure, its timeout, the teardown)
--   stalled      the rest before the last good step: stalls, hangs that recovered, restarts
-- The four add up to ranks x wall time. cost = GPU-hours x price_per_gpu_hour.
-- param: job_id String  the job
-- param: price_per_gpu_hour Float64 = 2.0  what one GPU-hour costs
WITH
    steps AS (
        SELECT rank, start_ns, end_ns, (end_ns - start_ns) / 1e9 AS d, status
        FROM {db:Identifier}.spans FINAL
        WHERE job_id = {job_id:String} AND phase = 'step'
    ),
    (SELECT min(start_ns) FROM steps) AS t0,
    (SELECT max(end_ns) FROM steps) AS t1,
    (SELECT quantileExactIf(0.5)(d, status = 'ok') FROM steps) AS med,
    last_good AS (
        SELECT rank, if(countIf(status = 'ok') = 0, t0, maxIf(end_ns, status = 'ok')) AS last_ok
        FROM steps GROUP BY rank
    ),
    per_rank AS (
        SELECT
            s.rank AS rank,
            any(g.last_ok) AS last_ok,
            sumIf(least(s.d, med), s.status = 'ok') AS productive,
            sumIf(greatest(s.d - med, 0), s.status = 'ok') AS slow,
            sumIf(s.d, s.status = 'ok') AS ok_s,
            sumIf(s.d, s.status != 'ok' AND s.end_ns <= g.last_ok) AS err_before
        FROM steps AS s INNER JOIN last_good AS g ON s.rank = g.rank
        GROUP BY s.rank
    )
SELECT
    {job_id:String} AS job_id,
    count() AS ranks,
    round((t1 - t0) / 1e9, 3) AS wall_s,
    round(count() * (t1 - t0) / 1e9 / 3600, 4) AS gpu_hours,
    round(sum(productive) / 3600, 4) AS productive_gpu_hours,
    round(sum(slow) / 3600, 4) AS slow_step_gpu_hours,
    round(sum(err_before + (t1 - last_ok) / 1e9) / 3600, 4) AS failed_gpu_hours,
    round(sum(greatest((last_ok - t0) / 1e9 - ok_s - err_before, 0)) / 3600, 4)
        AS stalled_gpu_hours,
    round(100 * sum(productive) / (count() * (t1 - t0) / 1e9), 2) AS goodput_pct,
    round(count() * (t1 - t0) / 1e9 / 3600 * {price_per_gpu_hour:Float64}, 2) AS cost,
    round((count() * (t1 - t0) / 1e9 - sum(productive)) / 3600 * {price_per_gpu_hour:Float64}, 2)
        AS cost_lost
FROM per_rank
HAVING count() > 0
