-- rankscope 0011: gpu_event/1 gained the optional xid_bucket (issue 17; additive, per the
-- compatibility rule): the XID catalogue's immediate-action bucket. Older rows read ''.

ALTER TABLE {db}.gpu_events ADD COLUMN IF NOT EXISTS xid_bucket LowCardinality(String) AFTER sxid;
