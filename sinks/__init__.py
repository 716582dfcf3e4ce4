"""Sinks: Kafka -> ClickHouse through clickhouse-connect (server or embedded chDB)."""
