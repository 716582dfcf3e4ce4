-- name: slowest_ranks
-- summary: The k slowest ranks of a job by mean step time, against the job's median rank.
-- The top-k list behind the per-rank panels: at thousands of ranks one line per rank is
-- unreadable, the slowest few (and how far they are from the median rank) is the question.
-- Read from the per-rank windows; `vs_median` is the rank's mean over the median of all ranks'
-- means (a window function over every rank, before the limit).
-- param: job_id String  the job
-- param: k UInt32 = 10  how many ranks
-- param: hours UInt32 = 0  how far back (0: the whole job)
SELECT rank, node, mean_step_s, max_step_s, windows,
    round(mean_step_s / nullIf(job_median_s, 0), 3) AS vs_median
FROM (
    SELECT rank, node, mean_step_s, max_step_s, windows,
        median(mean_step_s) OVER () AS job_median_s
    FROM (
        SELECT rank, any(node) AS node, avg(step_time_mean_s) AS mean_step_s,
            max(step_time_max_s) AS max_step_s, count() AS windows
        FROM {db:Identifier}.rank_windows FINAL
        WHERE job_id = {job_id:String} AND step_time_mean_s IS NOT NULL
            AND ({hours:UInt32} = 0 OR window_start >= now64() - toIntervalHour({hours:UInt32}))
        GROUP BY rank
    )
)
ORDER BY mean_step_s DESC, rank
LIMIT {k:UInt32}
