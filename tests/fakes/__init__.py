"""Fakes of external systems (NVML, ...) for tests and benchmarks."""
