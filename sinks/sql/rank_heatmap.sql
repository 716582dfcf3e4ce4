-- name: rank_heatmap
-- summary: Per rank and event-time window, one metric of the job (a heatmap's cells).
-- metric: a rank_windows column: step_time_mean_s, step_time_max_s, gpu_util_mean_pct,
-- step_count, event_count.
-- param: job_id String  the job
-- param: metric Identifier = step_time_mean_s  the column to show
SELECT window_start, rank, node, {metric:Identifier} AS value
FROM {db:Identifier}.rank_windows FINAL
WHERE job_id = {job_id:String}
ORDER BY window_start, rank
