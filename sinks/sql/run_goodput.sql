-- name: run_goodput
-- summary: Goodput per run: the share of all its attempts' GPU-hours that was not lost.
-- goodput_pct = 100 x (gpu_hours - lost_gpu_hours) / gpu_hours over every attempt of the run;
-- step_efficiency_pct = 100 x the steps the run needed (last step - first step + 1) over the
-- steps it ran (those plus the recomputed ones). A run still going counts its attempts so far.
-- param: run_id String = ''  one run (empty: every run)
-- param: hours UInt32 = 0  runs with an attempt that started in the last hours (0: all)
SELECT
    a.cluster AS cluster,
    a.run_id AS run_id,
    count() AS attempts,
    max(a.outcome = 'job_completed') AS completed,
    min(a.first_step) AS first_step,
    max(a.last_step) AS last_step,
    sum(a.recomputed_steps) AS recomputed_steps,
    round(sum(a.gpu_hours), 4) AS gpu_hours,
    round(sum(a.gpu_hours) - sum(a.lost_gpu_hours), 4) AS useful_gpu_hours,
    round(100 * (sum(a.gpu_hours) - sum(a.lost_gpu_hours)) / nullIf(sum(a.gpu_hours), 0), 2)
        AS goodput_pct,
    round(100 * (max(a.last_step) - min(a.first_step) + 1)
        / nullIf(max(a.last_step) - min(a.first_step) + 1 + sum(a.recomputed_steps), 0), 2)
        AS step_efficiency_pct
FROM {named:run_attempts} AS a
GROUP BY a.cluster, a.run_id
ORDER BY goodput_pct, run_id
