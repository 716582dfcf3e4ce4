-- name: job_config
-- summary: What a job ran on: model/config key attributes, NCCL environment, versions, clocks, power, topology.
-- The configuration half of a reference baseline (schemas/baselines.py): the model, global batch
-- and NCCL_* environment from the span attributes the training process sets (rankscope.model,
-- rankscope.global_batch, rankscope.env.*); versions as most of the job's nodes report them in
-- their latest node_inventory; SM/memory clocks and power per GPU as medians of the job's GPU
-- samples; throughput as the median per-step sum of rankscope.samples / rankscope.tokens.
-- param: job_id String  the job
WITH
    job_spans AS (
        SELECT node, rank, step, ts_ns, attributes
        FROM {db:Identifier}.spans FINAL
        WHERE job_id = {job_id:String}
    ),
    inv AS (
        SELECT node,
            argMax(driver_version, ts_ns) AS driver_version,
            argMax(cuda_version, ts_ns) AS cuda_version,
            argMax(nccl_version, ts_ns) AS nccl_version,
            argMax(kernel, ts_ns) AS kernel,
            argMax(gpu_model, ts_ns) AS gpu_model,
            argMax(gpu_count, ts_ns) AS gpu_count,
            argMax(length(mapKeys(hca_firmware)), ts_ns) AS hcas
        FROM {db:Identifier}.node_inventory FINAL
        WHERE job_id = {job_id:String} OR node IN (SELECT DISTINCT node FROM job_spans)
        GROUP BY node
    ),
    gpu AS (
        SELECT sm_clock_mhz, mem_clock_mhz, power_w
        FROM {db:Identifier}.gpu_samples FINAL
        WHERE job_id = {job_id:String}
    ),
    per_step AS (
        SELECT step,
            sum(toFloat64OrZero(attributes['rankscope.samples'])) AS samples,
            sum(toFloat64OrZero(attributes['rankscope.tokens'])) AS tokens
        FROM job_spans WHERE step >= 0 GROUP BY step
    )
SELECT
    (SELECT anyIf(attributes['rankscope.model'], attributes['rankscope.model'] != '')
        FROM job_spans) AS model,
    (SELECT toUInt64OrZero(anyIf(attributes['rankscope.global_batch'],
        attributes['rankscope.global_batch'] != '')) FROM job_spans) AS global_batch,
    (SELECT argMinIf(mapFilter((k, v) -> startsWith(k, 'rankscope.env.'), attributes), ts_ns,
        length(mapFilter((k, v) -> startsWith(k, 'rankscope.env.'), attributes)) > 0)
        FROM job_spans) AS env,
    (SELECT uniqExactIf(rank, rank >= 0) FROM job_spans) AS ranks,
    (SELECT topKIf(1)(driver_version, driver_version != '') FROM inv) AS driver_version,
    (SELECT topKIf(1)(cuda_version, cuda_version != '') FROM inv) AS cuda_version,
    (SELECT topKIf(1)(nccl_version, nccl_version != '') FROM inv) AS nccl_version,
    (SELECT topKIf(1)(kernel, kernel != '') FROM inv) AS kernel,
    (SELECT topKIf(1)(gpu_model, gpu_model != '') FROM inv) AS gpu_model,
    (SELECT max(gpu_count) FROM inv) AS gpus_per_node,
    (SELECT count() FROM inv) AS nodes,
    (SELECT max(hcas) FROM inv) AS hcas_per_node,
    (SELECT quantileExactInclusiveIf(0.5)(sm_clock_mhz, sm_clock_mhz > 0) FROM gpu) AS sm_clock_mhz,
    (SELECT quantileExactInclusiveIf(0.5)(mem_clock_mhz, mem_clock_mhz > 0) FROM gpu)
        AS mem_clock_mhz,
    (SELECT quantileExactInclusiveIf(0.5)(power_w, isNotNull(power_w)) FROM gpu) AS power_w,
    (SELECT quantileExactInclusiveIf(0.5)(samples, samples > 0) FROM per_step) AS samples_per_step,
    (SELECT quantileExactInclusiveIf(0.5)(tokens, tokens > 0) FROM per_step) AS tokens_per_step
