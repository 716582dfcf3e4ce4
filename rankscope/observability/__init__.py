"""Self-monitoring of rankscope's long-running processes: metrics and health endpoints."""
