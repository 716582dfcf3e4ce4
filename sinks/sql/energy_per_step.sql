-- name: energy_per_step
-- summary: A job's energy from the NVML energy counters: joules per step and per job, perf/watt.
-- Each GPU's energy is the rise of its counter (last - first sample, mJ) over the job; steps
-- are the highest step any rank completed. Performance per watt is steps per second per kW of
-- average power.
-- param: job_id String  the job
WITH
    per_gpu AS (
        SELECT node, gpu,
            (max(energy_mj) - min(energy_mj)) / 1000 AS energy_j,
            avg(power_w) AS power_w,
            (max(ts_ns) - min(ts_ns)) / 1e9 AS span_s
        FROM {db:Identifier}.gpu_samples FINAL
        WHERE job_id = {job_id:String} AND energy_mj IS NOT NULL
        GROUP BY node, gpu
    ),
    (SELECT max(step) FROM {db:Identifier}.spans FINAL
        WHERE job_id = {job_id:String} AND phase = 'step' AND status = 'ok') AS steps,
    (SELECT (max(end_ns) - min(start_ns)) / 1e9 FROM {db:Identifier}.spans FINAL
        WHERE job_id = {job_id:String} AND phase = 'step') AS wall_s
SELECT
    {job_id:String} AS job_id,
    count() AS gpus,
    round(sum(energy_j), 1) AS job_energy_j,
    round(sum(energy_j) / 3.6e6, 4) AS job_energy_kwh,
    steps,
    round(sum(energy_j) / nullIf(steps, 0), 1) AS joules_per_step,
    round(sum(power_w), 1) AS job_power_w,
    round(steps / nullIf(wall_s, 0) / nullIf(sum(power_w) / 1000, 0), 4) AS steps_per_s_per_kw
FROM per_gpu
HAVING count() > 0
