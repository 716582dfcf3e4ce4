-- name: run_cost
-- summary: Cost per completed run: every attempt's GPU-hours and energy charged to the run.
-- A run is completed when one of its attempts ended in job_completed. Failed, preempted and
-- requeued attempts are charged to it whole (gpu_hours, energy_kwh, cost); of that, what they
-- lost (the work after their last checkpoint, recomputed by the next attempt, and the failure)
-- is lost_gpu_hours, lost_energy_kwh and cost_lost (per-attempt rules: run_attempts.sql).
-- cost = GPU-hours x price_per_gpu_hour (rankscope's setting; see docs/reference.md "Runs").
-- param: run_id String = ''  one run (empty: every completed run)
-- param: hours UInt32 = 0  runs with an attempt that started in the last hours (0: all)
-- param: price_per_gpu_hour Float64  what one GPU-hour costs
SELECT
    a.cluster AS cluster,
    a.run_id AS run_id,
    count() AS attempts,
    countIf(a.outcome != 'job_completed') AS failed_attempts,
    argMaxIf(a.job_id, a.attempt, a.outcome = 'job_completed') AS completed_job_id,
    round(sum(a.gpu_hours), 4) AS gpu_hours,
    round(sum(a.energy_j) / 3.6e6, 4) AS energy_kwh,
    sum(a.recomputed_steps) AS recomputed_steps,
    round(sum(a.lost_gpu_hours), 4) AS lost_gpu_hours,
    round(sum(a.lost_energy_j) / 3.6e6, 4) AS lost_energy_kwh,
    round(sum(a.gpu_hours) * {price_per_gpu_hour:Float64}, 2) AS cost,
    round(sum(a.lost_gpu_hours) * {price_per_gpu_hour:Float64}, 2) AS cost_lost
FROM {named:run_attempts} AS a
GROUP BY a.cluster, a.run_id
HAVING countIf(a.outcome = 'job_completed') > 0
ORDER BY cost DESC, run_id
