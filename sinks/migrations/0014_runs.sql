-- rankscope 0014: runs across job attempts (issue 19).
-- scheduler_event/1 gained two optional fields (additive, per the compatibility rule): run_id, the
-- training run a job attempt belongs to (Slurm requeues, array and dependency chains, Kubernetes
-- restarts, an explicit rule), and attempt, 1-based within the run (0: unknown).
--
-- job_attempts: one row per (cluster, run_id, job_id, attempt): from the scheduler's events when
-- they carry a run id (when the attempt started and ended and how; the latest end event wins;
-- end 0 = still running), else from rank 0's step spans whose resource set rankscope.run_id (and
-- rankscope.attempt, default 1) in the training code, ended by the job's first end event after
-- their first step. Plain views over the event tables: a replay of the topics rebuilds them.
-- run_attempts: the per-attempt accounting every run query reads (sinks/sql/run_attempts.sql):
--   SELECT * FROM rankscope.run_attempts(run_id = 'r', hours = 0)

ALTER TABLE {db}.scheduler_events ADD COLUMN IF NOT EXISTS run_id LowCardinality(String) AFTER exit_code;
ALTER TABLE {db}.scheduler_events ADD COLUMN IF NOT EXISTS attempt UInt32 AFTER run_id;

CREATE OR REPLACE VIEW {db}.job_attempts AS
WITH
    ['job_completed', 'job_failed', 'job_requeued', 'job_cancelled', 'job_timeout', 'preempted',
        'oom_killed'] AS ends,
    scheduled AS (
        SELECT
            cluster,
            run_id,
            job_id,
            attempt,
            if(countIf(event_type = 'job_started') > 0, minIf(ts_ns, event_type = 'job_started'),
                min(ts_ns)) AS start_ns,
            maxIf(ts_ns, has(ends, event_type)) AS end_ns,
            -- at one time a requeue gives way to its cause (Slurm: preempted, then requeued)
            argMaxIf(event_type, (ts_ns, event_type != 'job_requeued'), has(ends, event_type))
                AS outcome,
            groupUniqArray(event_type) AS event_types
        FROM {db}.scheduler_events FINAL
        WHERE run_id != '' AND attempt > 0
        GROUP BY cluster, run_id, job_id, attempt
    ),
    traced AS (
        SELECT
            cluster,
            attributes['rankscope.run_id'] AS run_id,
            job_id,
            greatest(toUInt32OrZero(attributes['rankscope.attempt']), 1) AS attempt,
            min(start_ns) AS start_ns
        FROM {db}.spans
        -- rank 0's step spans say it (every rank's resource does): the attribute map, the
        -- costly column, is read for 1 span in ranks
        PREWHERE rank = 0 AND phase = 'step'
        WHERE attributes['rankscope.run_id'] != ''
            AND (cluster, job_id) NOT IN (SELECT cluster, job_id FROM scheduled)
        GROUP BY cluster, run_id, job_id, attempt
    ),
    traced_ends AS (
        SELECT t.cluster AS cluster, t.run_id AS run_id, t.job_id AS job_id,
            t.attempt AS attempt, any(t.start_ns) AS start_ns,
            minIf(e.ts_ns, e.ts_ns >= t.start_ns) AS end_ns,
            argMinIf(e.event_type, e.ts_ns, e.ts_ns >= t.start_ns) AS outcome
        FROM traced AS t
        LEFT JOIN (
            SELECT cluster, job_id, ts_ns, event_type FROM {db}.scheduler_events FINAL
            WHERE has(ends, event_type) AND job_id IN (SELECT job_id FROM traced)
        ) AS e ON t.cluster = e.cluster AND t.job_id = e.job_id
        GROUP BY cluster, run_id, job_id, attempt
    )
SELECT cluster, run_id, job_id, attempt, start_ns, end_ns, outcome, event_types,
    'scheduler' AS source
FROM scheduled
UNION ALL
SELECT cluster, run_id, job_id, attempt, start_ns, end_ns, outcome, [outcome] AS event_types,
    'otel' AS source
FROM traced_ends;

CREATE OR REPLACE VIEW {db}.run_attempts AS {named:run_attempts}
