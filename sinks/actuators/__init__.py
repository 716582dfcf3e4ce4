"""Actuators: run recovery decisions at most once per idempotency key (issue 7)."""
