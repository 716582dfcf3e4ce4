"""Stream-driven recovery: findings -> policy -> recovery decisions (issue 7)."""
