-- name: run_losses
-- summary: GPU-hours and energy lost by attempts that did not complete, per cause class.
-- The cause class of an attempt is that of its first incident (the incidents table), else the
-- scheduler's word (preempted: scheduler_preemption, oom_killed: host_oom), else unknown; what
-- an attempt lost is run_attempts.sql's lost_gpu_hours and lost_energy_j.
-- param: run_id String = ''  one run (empty: every run)
-- param: hours UInt32 = 0  runs with an attempt that started in the last hours (0: all)
-- param: price_per_gpu_hour Float64  what one GPU-hour costs
SELECT
    a.cause_class AS cause_class,
    count() AS attempts,
    uniqExact(a.run_id) AS runs,
    sum(a.recomputed_steps) AS recomputed_steps,
    round(sum(a.lost_gpu_hours), 4) AS lost_gpu_hours,
    round(sum(a.lost_energy_j) / 3.6e6, 4) AS lost_energy_kwh,
    round(sum(a.lost_gpu_hours) * {price_per_gpu_hour:Float64}, 2) AS cost_lost
FROM {named:run_attempts} AS a
WHERE a.outcome != 'job_completed'
GROUP BY a.cause_class
ORDER BY lost_gpu_hours DESC, cause_class
