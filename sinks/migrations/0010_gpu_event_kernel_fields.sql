-- rankscope 0010: gpu_event/1 gained optional fields for kernel-log events (issue 17; additive,
-- per the compatibility rule). NVML events keep the defaults ('' and NULL).

ALTER TABLE {db}.gpu_events ADD COLUMN IF NOT EXISTS pci_bus_id LowCardinality(String) AFTER message;
ALTER TABLE {db}.gpu_events ADD COLUMN IF NOT EXISTS source LowCardinality(String) AFTER pci_bus_id;
ALTER TABLE {db}.gpu_events ADD COLUMN IF NOT EXISTS pattern LowCardinality(String) AFTER source;
ALTER TABLE {db}.gpu_events ADD COLUMN IF NOT EXISTS sxid Nullable(UInt32) AFTER pattern;
