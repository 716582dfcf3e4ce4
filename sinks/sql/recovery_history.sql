-- name: recovery_history
-- summary: Automated recovery, newest first: each action's decision, outcome and progress.
-- Every stage of one action shares its idempotency key: decided (or suppressed, with why),
-- succeeded or failed (what the actuator did), progress_resumed or progress_not_resumed.
-- param: job_id String = ''  one job (empty: all)
-- param: hours UInt32 = 24  how far back
SELECT ts, job_id, action, stage, attempt, node, rank, rule, reason, key
FROM {db:Identifier}.recovery_actions FINAL
WHERE ts >= now64() - toIntervalHour({hours:UInt32})
    AND ({job_id:String} = '' OR job_id = {job_id:String})
ORDER BY ts DESC, key, stage
