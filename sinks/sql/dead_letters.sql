-- name: dead_letters
-- summary: Refused input by reason and source topic: how much, one example reason, when last.
-- param: hours UInt32 = 24  how far back
SELECT reason_code, source_topic, count() AS records, any(reason) AS example,
    max(received_at) AS last_seen
FROM {db:Identifier}.deadletter FINAL
WHERE received_at >= now() - toIntervalHour({hours:UInt32})
GROUP BY reason_code, source_topic
ORDER BY records DESC, reason_code, source_topic
