-- name: straggler_history
-- summary: A job's straggler findings in order: which rank, which class, how slow, since when.
-- param: job_id String  the job
SELECT
    fromUnixTimestamp64Nano(onset_ts_ns) AS onset,
    fromUnixTimestamp64Nano(detected_ts_ns) AS detected,
    rank,
    node,
    straggler_class,
    round(score, 3) AS score,
    summary
FROM {db:Identifier}.detections FINAL
WHERE job_id = {job_id:String} AND detection_type = 'straggler'
ORDER BY onset_ts_ns, rank
