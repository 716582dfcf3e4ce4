-- name: incidents
-- summary: The latest revision of each incident, newest first: cause, place, confidence, evidence.
-- What `rankscope incidents` and the reports render.
-- param: job_id String = ''  one job (empty: all)
-- param: limit UInt32 = 20  at most this many
SELECT *
FROM {db:Identifier}.incidents FINAL
WHERE {job_id:String} = '' OR job_id = {job_id:String}
ORDER BY first_cause_ts_ns DESC, incident_id
LIMIT {limit:UInt32}
