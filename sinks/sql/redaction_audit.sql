-- name: redaction_audit
-- summary: What redaction found and did, per kind, field, entity and action (counts, never values).
-- param: hours UInt32 = 24  how far back
-- param: job_id String = ''  one job (empty: all)
SELECT kind, field, entity, action, sum(count) AS findings,
    min(window_start) AS first_window, max(window_start) AS last_window
FROM {db:Identifier}.redaction_audit FINAL
WHERE window_start >= now() - toIntervalHour({hours:UInt32})
    AND ({job_id:String} = '' OR job_id = {job_id:String})
GROUP BY kind, field, entity, action
ORDER BY findings DESC, kind, field, entity, action
