-- rankscope 0012: gpu_sample/1 gained optional fields for dcgm-exporter as a GPU source (issue 17;
-- additive, per the compatibility rule): the DCGM profiling values (SM active, SM occupancy,
-- tensor/DRAM/graphics-engine active as percent; NVLink and PCIe bytes/s), DCGM's NVLink
-- bandwidth total and which source sampled the GPU. NVML samples keep the defaults ('' and NULL).
-- sm_util_pct keeps its name: it is NVML's GPU utilization, documented on the field.

ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS source LowCardinality(String) AFTER nvlink_errors_total;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS sm_active_pct Nullable(Float32) AFTER source;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS sm_occupancy_pct Nullable(Float32) AFTER sm_active_pct;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS tensor_active_pct Nullable(Float32) AFTER sm_occupancy_pct;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS dram_active_pct Nullable(Float32) AFTER tensor_active_pct;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS gr_engine_active_pct Nullable(Float32) AFTER dram_active_pct;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS nvlink_tx_bytes_per_s Nullable(Float64) AFTER gr_engine_active_pct;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS nvlink_rx_bytes_per_s Nullable(Float64) AFTER nvlink_tx_bytes_per_s;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS pcie_tx_bytes_per_s Nullable(Float64) AFTER nvlink_rx_bytes_per_s;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS pcie_rx_bytes_per_s Nullable(Float64) AFTER pcie_tx_bytes_per_s;
ALTER TABLE {db}.gpu_samples ADD COLUMN IF NOT EXISTS nvlink_bandwidth_total Nullable(Float64) AFTER pcie_rx_bytes_per_s;
