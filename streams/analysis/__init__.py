"""Per-job streaming analysis: clock alignment, detectors, root cause."""
