-- name: rank_heatmap_buckets
-- summary: A job's per-rank heatmap folded into at most `buckets` rows of adjacent ranks.
-- Readable at any job size: ranks are grouped into equal runs (bucket width = ceil(ranks /
-- buckets)), each cell the worst (max) value of its ranks in the interval, so a straggler shows
-- in its bucket. `ranks` labels the run (zero-padded, so the labels sort as the ranks do); the
-- Grafana heatmap reads time, ranks, value as the plugin's time series format (one field per
-- bucket), the demo's PNG draws the same rows.
-- metric: a rank_windows column: step_time_mean_s, step_time_max_s, gpu_util_mean_pct,
-- step_count, event_count.
-- param: job_id String  the job
-- param: metric Identifier = step_time_mean_s  the column to show
-- param: buckets UInt32 = 64  the most rows
-- param: interval_s UInt32 = 5  the time bucket (s)
WITH
    (SELECT toUInt32(max(rank) + 1) FROM {db:Identifier}.rank_windows FINAL
        WHERE job_id = {job_id:String}) AS n_ranks,
    toUInt32(ceil(n_ranks / greatest({buckets:UInt32}, 1))) AS width,
    length(toString(n_ranks - 1)) AS digits
SELECT
    toStartOfInterval(window_start, toIntervalSecond(greatest({interval_s:UInt32}, 1))) AS time,
    intDiv(toUInt32(rank), width) AS bucket,
    if(width = 1,
        concat('rank ', leftPad(toString(bucket), digits, '0')),
        concat('ranks ', leftPad(toString(bucket * width), digits, '0'), '-',
            leftPad(toString(least(bucket * width + width - 1, n_ranks - 1)), digits, '0'))
    ) AS ranks,
    max({metric:Identifier}) AS value
FROM {db:Identifier}.rank_windows FINAL
WHERE job_id = {job_id:String}
GROUP BY time, bucket, ranks
ORDER BY time, bucket
