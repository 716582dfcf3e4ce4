-- rankscope 0014: runs across job attempts (issue 19).
-- scheduler_event/1 gained two optional fields (additive, per the compatibility rule): run_id, the
-- training run a job attempt belongs to (Slurm requeues, array and dependency chains, Kubernetes
-- restarts, an explicit rule), and attempt, 1-based within the run (0: unknown).
--
-- job_attempts: one row per (cluster, run_id, job_id, attempt) from the scheduler's events that
-- carry a run id: when the attempt started and ended and how (the latest end event wins; end 0 =
-- still running). A plain view over scheduler_events: a replay of the topic rebuilds it.
-- run_attempts: the per-attempt accounting every run query reads (sinks/sql/run_attempts.sql):
--   SELECT * FROM rankscope.run_attempts(run_id = 'r', hours = 0)

ALTER TABLE {db}.scheduler_events ADD COLUMN IF NOT EXISTS run_id LowCardinality(String) AFTER exit_code;
ALTER TABLE {db}.scheduler_events ADD COLUMN IF NOT EXISTS attempt UInt32 AFTER run_id;

CREATE OR REPLACE VIEW {db}.job_attempts AS
SELECT
    cluster,
    run_id,
    job_id,
    attempt,
    if(countIf(event_type = 'job_started') > 0, minIf(ts_ns, event_type = 'job_started'),
        min(ts_ns)) AS start_ns,
    maxIf(ts_ns, event_type IN ('job_completed', 'job_failed', 'job_requeued', 'job_cancelled',
        'job_timeout', 'preempted', 'oom_killed')) AS end_ns,
    -- at one time a requeue gives way to its cause (Slurm: preempted, then requeued)
    argMaxIf(event_type, (ts_ns, event_type != 'job_requeued'), event_type IN ('job_completed',
        'job_failed', 'job_requeued', 'job_cancelled', 'job_timeout', 'preempted', 'oom_killed'))
        AS outcome,
    groupUniqArray(event_type) AS event_types
FROM {db}.scheduler_events FINAL
WHERE run_id != '' AND attempt > 0
GROUP BY cluster, run_id, job_id, attempt;

CREATE OR REPLACE VIEW {db}.run_attempts AS {named:run_attempts}
