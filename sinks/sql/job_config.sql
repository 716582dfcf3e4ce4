-- name: job_config
-- summary: What a job ran on: model/config key attributes, NCCL environment, versions, clocks, power, topology.
-- The configuration half of a reference baseline (schemas/baselines.py): the model, global batch
-- and NCCL_* environment from the span attributes the training process sets (rankscope.model,
-- rankscope.global_batch, rankscope.env.*); versions as most of the job's nodes report them in
-- their latest node_inventory; SM/memory clocks and power per GPU as medians of the job's GPU
-- samples; throughput as the median per-step sum of rankscope.samples / rankscope.tokens. The
-- job's spans are read once (per step, then folded); the NCCL environment is the one of the
-- earliest span that carries any rankscope.env.* attribute.
-- param: job_id String  the job
WITH
    per_step AS (
        SELECT step,
            anyIf(attributes['rankscope.model'], attributes['rankscope.model'] != '') AS model,
            anyIf(attributes['rankscope.global_batch'], attributes['rankscope.global_batch'] != '')
                AS batch,
            argMinIf(attributes, ts_ns,
                arrayExists(k -> startsWith(k, 'rankscope.env.'), mapKeys(attributes))) AS attrs,
            minIf(ts_ns, arrayExists(k -> startsWith(k, 'rankscope.env.'), mapKeys(attributes)))
                AS env_ts,
            groupUniqArrayIf(rank, rank >= 0) AS ranks,
            sum(toFloat64OrZero(attributes['rankscope.samples'])) AS samples,
            sum(toFloat64OrZero(attributes['rankscope.tokens'])) AS tokens
        FROM {db:Identifier}.spans FINAL
        WHERE job_id = {job_id:String}
        GROUP BY step
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
        WHERE job_id = {job_id:String}
            OR node IN (SELECT DISTINCT node FROM {db:Identifier}.spans WHERE job_id = {job_id:String})
        GROUP BY node
    ),
    gpu AS (
        SELECT sm_clock_mhz, mem_clock_mhz, power_w
        FROM {db:Identifier}.gpu_samples FINAL
        WHERE job_id = {job_id:String}
    ),
    (
        SELECT tuple(
            topKIf(1)(driver_version, driver_version != ''),
            topKIf(1)(cuda_version, cuda_version != ''),
            topKIf(1)(nccl_version, nccl_version != ''),
            topKIf(1)(kernel, kernel != ''),
            topKIf(1)(gpu_model, gpu_model != ''),
            max(gpu_count),
            count(),
            max(hcas))
        FROM inv
    ) AS inv_facts,
    (
        SELECT tuple(
            quantileExactInclusiveIf(0.5)(sm_clock_mhz, sm_clock_mhz > 0),
            quantileExactInclusiveIf(0.5)(mem_clock_mhz, mem_clock_mhz > 0),
            quantileExactInclusiveIf(0.5)(power_w, isNotNull(power_w)))
        FROM gpu
    ) AS gpu_facts
SELECT
    anyIf(model, model != '') AS model,
    toUInt64OrZero(anyIf(batch, batch != '')) AS global_batch,
    mapFilter((k, v) -> startsWith(k, 'rankscope.env.'), argMinIf(attrs, env_ts, env_ts > 0))
        AS env,
    length(groupUniqArrayArray(ranks)) AS ranks,
    tupleElement(inv_facts, 1) AS driver_version,
    tupleElement(inv_facts, 2) AS cuda_version,
    tupleElement(inv_facts, 3) AS nccl_version,
    tupleElement(inv_facts, 4) AS kernel,
    tupleElement(inv_facts, 5) AS gpu_model,
    tupleElement(inv_facts, 6) AS gpus_per_node,
    tupleElement(inv_facts, 7) AS nodes,
    tupleElement(inv_facts, 8) AS hcas_per_node,
    tupleElement(gpu_facts, 1) AS sm_clock_mhz,
    tupleElement(gpu_facts, 2) AS mem_clock_mhz,
    tupleElement(gpu_facts, 3) AS power_w,
    quantileExactInclusiveIf(0.5)(samples, samples > 0) AS samples_per_step,
    quantileExactInclusiveIf(0.5)(tokens, tokens > 0) AS tokens_per_step
FROM per_step
