-- name: fleet_drift
-- summary: Drifted nodes: per pool, what differs from the pool's majority, since when.
-- One row per node_drift finding (a node and the configuration it runs), its latest emission:
-- `differs` names the attributes (driver_version, nccl_version, extra.<setting>, ...),
-- `what` each value against the majority, `since` the event time of the first inventory
-- showing the divergence. A node back with its pool is left out unless include_cleared = 1
-- (`cleared` then says since when it matches again).
-- param: cluster String = ''  one cluster (empty: all)
-- param: include_cleared UInt8 = 0  1: also the nodes that returned to the majority
SELECT cluster, pool, pool_size, node, differs, what, since,
    if(cleared_ns = 0, NULL, fromUnixTimestamp64Nano(cleared_ns)) AS cleared, detection_id
FROM (
    SELECT detection_id, cluster, node,
        argMax(details['pool'], emitted_ts_ns) AS pool,
        toUInt32OrZero(argMax(details['pool_size'], emitted_ts_ns)) AS pool_size,
        argMax(details['differs'], emitted_ts_ns) AS differs,
        argMax(arrayStringConcat(evidence, '; '), emitted_ts_ns) AS what,
        fromUnixTimestamp64Nano(min(onset_ts_ns)) AS since,
        argMax(toInt64OrZero(details['cleared_ts']), emitted_ts_ns) AS cleared_ns
    FROM {db:Identifier}.detections
    WHERE detection_type = 'node_drift'
        AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY detection_id, cluster, node
)
WHERE {include_cleared:UInt8} = 1 OR cleared_ns = 0
ORDER BY cluster, pool, node
