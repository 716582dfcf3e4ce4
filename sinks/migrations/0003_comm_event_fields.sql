-- rankscope 0003: comm_event/1 gained optional fields (additive, per the compatibility rule).

ALTER TABLE {db}.comm_events ADD COLUMN IF NOT EXISTS host LowCardinality(String) AFTER message;
ALTER TABLE {db}.comm_events ADD COLUMN IF NOT EXISTS hca LowCardinality(String) AFTER host;
ALTER TABLE {db}.comm_events ADD COLUMN IF NOT EXISTS cuda_dev Nullable(Int16) AFTER hca;
ALTER TABLE {db}.comm_events ADD COLUMN IF NOT EXISTS ib_status Nullable(Int32) AFTER cuda_dev;
ALTER TABLE {db}.comm_events ADD COLUMN IF NOT EXISTS vendor_err Nullable(Int64) AFTER ib_status;
ALTER TABLE {db}.comm_events ADD COLUMN IF NOT EXISTS pg_rank Nullable(Int32) AFTER vendor_err;
