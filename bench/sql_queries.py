"""Every named query on 100 million GPU samples: time (3 runs), rows and bytes read.

The data is generated inside ClickHouse (no Python in the loop): 64 jobs of 256 ranks over a
week; GPU samples evenly spaced per rank until ``--rows`` of them exist, and one step span per
rank per 10 minutes for the same jobs over the week. The questions are those of a person looking
at one job (its named queries), at one job and one hour (the dashboards' GPU panel), or at the
fleet over 24 hours.

    .venv/bin/python bench/sql_queries.py --rows 100000000        # needs ~3 GB of disk
    .venv/bin/python bench/sql_queries.py --rows 5000000          # a quick look

Uses the local services' ClickHouse (started and stopped here) unless ``--clickhouse-url``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankscope.sinks.clickhouse import available_migrations, connect, migrate
from rankscope.sinks.named_queries import default_price_per_gpu_hour, load_queries

ROOT = Path(__file__).resolve().parents[1]
JOBS, RANKS = 64, 256


def generate(client: Any, db: str, rows: int, start_s: int) -> dict[str, int]:
    """GPU samples round-robin over jobs and ranks, one per ``period`` seconds per rank."""
    per_tick = JOBS * RANKS
    ticks = rows // per_tick
    period = max(1, (7 * 86400) // max(ticks, 1))
    client.command(
        f"INSERT INTO {db}.gpu_samples (event_id, schema, cluster, job_id, node, rank, local_rank,"
        " gpu, ts_ns, observed_ts_ns, gpu_uuid, sm_util_pct, power_w, energy_mj, temperature_c) "
        "SELECT toString(number), 'gpu_sample/1', 'bench', "
        f"concat('job-', toString(number % {JOBS})), "
        f"concat('node', toString(number % {JOBS}), '-', toString(intDiv(number, {JOBS}) % "
        f"{RANKS} DIV 8)), intDiv(number, {JOBS}) % {RANKS}, 0, "
        f"(intDiv(number, {JOBS}) % {RANKS}) % 8, "
        f"({start_s} + intDiv(number, {per_tick}) * {period}) * 1000000000, 0, '', "
        "50 + (number % 50), 400, "
        f"toUInt64(intDiv(number, {per_tick}) * {period} * 400000), 60 "
        f"FROM numbers({ticks * per_tick})",
        settings={"max_insert_threads": 2, "max_partitions_per_insert_block": 1000},
    )
    span_ticks = (7 * 86400) // 600  # one step span per rank per 10 minutes
    client.command(
        f"INSERT INTO {db}.spans (event_id, schema, cluster, job_id, node, rank, local_rank, gpu, "
        "ts_ns, observed_ts_ns, name, phase, trace_id, span_id, parent_span_id, start_ns, end_ns, "
        "step, status, error_type, error_message) "
        "SELECT concat('s', toString(number)), 'span/1', 'bench', "
        f"concat('job-', toString(number % {JOBS})), "
        f"concat('node', toString(number % {JOBS}), '-', toString(intDiv(number, {JOBS}) % "
        f"{RANKS} DIV 8)), intDiv(number, {JOBS}) % {RANKS}, 0, 0, "
        f"({start_s} + intDiv(number, {per_tick}) * 600 + 9) * 1000000000, 0, 'step', 'step', "
        "leftPad(hex(number), 32, '0'), leftPad(hex(number), 16, '0'), '', "
        f"({start_s} + intDiv(number, {per_tick}) * 600) * 1000000000, "
        f"({start_s} + intDiv(number, {per_tick}) * 600 + 9) * 1000000000, "
        f"intDiv(number, {per_tick}), 'ok', '', '' FROM numbers({span_ticks * per_tick})",
        settings={"max_insert_threads": 2, "max_partitions_per_insert_block": 1000},
    )
    _derived(client, db, start_s, per_tick)
    _runs(client, db, start_s)
    tables = ("gpu_samples", "spans", "rank_windows", "comm_events", "gpu_events", "fabric_events")
    tables += ("detections", "incidents", "redaction_audit", "deadletter")
    tables += ("scheduler_events", "node_inventory")
    counts = {
        t: int(client.query(f"SELECT count() FROM {db}.{t}").result_rows[0][0]) for t in tables
    }
    return counts | {"sample_period_s": period}


def _derived(client: Any, db: str, start_s: int, per_tick: int) -> None:
    """The other tables at fleet scale, so no named query runs on an empty table: windows per
    rank every 10 minutes, NCCL errors, XIDs, link errors, findings, audit, dead letters."""
    week, job = 7 * 86400, f"concat('job-', toString(number % {JOBS}))"
    ts = f"({start_s} + (number * 7919) % {week}) * 1000000000"
    node = f"concat('node', toString(number % {JOBS}), '-', toString(number % 32))"
    inserts = [
        f"INSERT INTO {db}.rank_windows (window_id, cluster, job_id, rank, node, window_start_ns, "
        "window_end_ns, step_count, step_time_mean_s, step_time_max_s, gpu_util_mean_pct, "
        f"event_count, emitted_ts_ns) SELECT toString(number), 'bench', {job}, "
        f"intDiv(number, {JOBS}) % {RANKS}, {node}, "
        f"({start_s} + intDiv(number, {per_tick}) * 600) * 1000000000, "
        f"({start_s} + intDiv(number, {per_tick}) * 600 + 5) * 1000000000, 5, "
        "1 + (number % 7) / 100, 1.1, 90, 50, 0 FROM numbers(1008 * 16384)",
        f"INSERT INTO {db}.comm_events (event_id, schema, cluster, job_id, node, rank, local_rank,"
        " gpu, ts_ns, observed_ts_ns, source, event_type, message) SELECT concat('c', "
        f"toString(number)), 'comm_event/1', 'bench', {job}, {node}, number % {RANKS}, 0, 0, "
        f"{ts}, 0, 'nccl', ['nccl_warn', 'nccl_error', 'watchdog_timeout', 'net_ib_error'][number"
        " % 4 + 1], 'NCCL WARN ...' FROM numbers(1000000)",
        f"INSERT INTO {db}.gpu_events (event_id, schema, cluster, job_id, node, rank, local_rank, "
        "gpu, ts_ns, observed_ts_ns, gpu_uuid, event_type, xid, count, message) SELECT concat("
        f"'g', toString(number)), 'gpu_event/1', 'bench', {job}, {node}, -1, 0, number % 8, "
        f"{ts}, 0, '', ['xid', 'throttle_start', 'ecc'][number % 3 + 1], 79, 1, 'XID 79' "
        "FROM numbers(100000)",
        f"INSERT INTO {db}.fabric_events (event_id, schema, cluster, job_id, node, rank, "
        "local_rank, gpu, ts_ns, observed_ts_ns, event_type, device, counter, old_state, "
        "new_state, message) SELECT concat('f', toString(number)), 'fabric_event/1', 'bench', "
        f"{job}, {node}, -1, 0, 0, {ts}, 0, ['link_down', 'link_up'][number % 2 + 1], 'mlx5_0', "
        "'', '', '', '' FROM numbers(100000)",
        f"INSERT INTO {db}.detections (detection_id, detection_type, cluster, job_id, node, rank, "
        "gpu, straggler_class, score, onset_ts_ns, detected_ts_ns, emitted_ts_ns, summary, "
        "evidence, details) SELECT toString(number), ['straggler', 'hang'][number % 2 + 1], "
        f"'bench', {job}, {node}, number % {RANKS}, -1, 'thermal', 1.3, {ts}, {ts}, 0, 'slow', "
        "[], map() FROM numbers(20000)",
        # fleet drift (issue 19): three drifted nodes since a day into the week
        f"INSERT INTO {db}.detections (detection_id, detection_type, cluster, job_id, node, rank, "
        "gpu, straggler_class, score, onset_ts_ns, detected_ts_ns, emitted_ts_ns, summary, "
        "evidence, details) SELECT concat('drift', toString(number)), 'node_drift', 'bench', "
        "concat('fleet:', n), n, -1, -1, '', 1, t, t, 0, 'drift', [], map('pool', 'p', "
        "'pool_size', '64', 'differs', 'driver_version') FROM (SELECT number, concat('node', "
        f"toString(number * 7 % {JOBS}), '-', toString(number * 5 % 32)) AS n, "
        f"({start_s} + 86400) * 1000000000 AS t FROM numbers(3))",
        f"INSERT INTO {db}.incidents (incident_id, revision, cluster, job_id, cause_class, node, "
        "gpu, rank, device, confidence, summary, first_cause_ts_ns, first_symptom_ts_ns, "
        "attributed_ts_ns, emitted_ts_ns, symptom_ranks, evidence_json, clock_offsets_ns) "
        f"SELECT toString(number), 0, 'bench', {job}, 'gpu_xid', {node}, 1, 1, '', 0.9, 'x', "
        f"{ts}, {ts}, {ts}, 0, range(16), concat('[', arrayStringConcat(arrayMap(i -> "
        "concat('{\"ts\": ', toString(" + ts + ' + i), \', "node": "n", "rank": \', '
        'toString(i), \', "kind": "comm_event", "what": "x", "event_id": '
        '"e", "role": "symptom"}\'), range(20)), \', \'), \']\'), map() '
        "FROM numbers(10000)",
        f"INSERT INTO {db}.redaction_audit (audit_id, window_start_ns, cluster, job_id, kind, "
        "field, entity, rule, action, count, rules_version) SELECT toString(number), "
        f"{ts}, 'bench', {job}, 'span', 'error_message', ['API_TOKEN', 'IP_ADDRESS'][number % 2 "
        "+ 1], 'r', 'mask', 1, 'v' FROM numbers(100000)",
        f"INSERT INTO {db}.deadletter (dead_letter_id, reason_code, reason, source_topic, "
        "partition, offset, index_in_batch, size_bytes, sha256, received_ts_ns, record_ts_ns, "
        "event_id, schema, kind, job_id, node) SELECT toString(number), 'not_json', 'bad', "
        f"'bench.raw.span', 0, number, -1, 10, '', {ts}, 0, '', '', '', '', '' "
        "FROM numbers(10000)",
    ]
    for sql in inserts:
        client.command(sql, settings={"max_partitions_per_insert_block": 1000})


def _runs(client: Any, db: str, start_s: int) -> None:
    """Issue 19's data: each job is run ``run-<job>`` of three attempts of the same job id (a
    Slurm requeue): failed at day 3, preempted at day 6, completed an hour ago, the last started
    23 h ago (so the 24-hour questions see every run); a checkpoint span per rank every 6 hours;
    every step span with samples, tokens and a model; an inventory (GPU model) per node."""
    day, h = 86400, 3600
    attempts = [  # (attempt, start, end, end event), seconds from start_s
        (1, 0, 3 * day, "job_failed"),
        (2, 3 * day + h, 6 * day, "preempted"),
        (3, 6 * day + h, 7 * day - h, "job_completed"),
    ]
    rows = ", ".join(
        f"({a}, {s0}, '{what}', {t})"
        for a, s0, end, ev in attempts
        for what, t in (("job_started", s0), (ev, end))
    )
    client.command(
        f"INSERT INTO {db}.scheduler_events (event_id, schema, cluster, job_id, node, rank, "
        "local_rank, gpu, ts_ns, observed_ts_ns, source, event_type, state, reason, run_id, "
        "attempt) SELECT concat('r', toString(number), '-', toString(e.2), e.3), "
        f"'scheduler_event/1', 'bench', concat('job-', toString(number % {JOBS})), '', -1, -1, "
        f"-1, ({start_s} + e.4) * 1000000000, 0, 'slurm', e.3, '', '', "
        f"concat('run-', toString(number % {JOBS})), e.1 "
        f"FROM numbers({JOBS}) ARRAY JOIN [{rows}] AS e"
    )
    per_tick, ckpts = JOBS * RANKS, 7 * 4
    client.command(
        f"INSERT INTO {db}.spans (event_id, schema, cluster, job_id, node, rank, local_rank, gpu, "
        "ts_ns, observed_ts_ns, name, phase, trace_id, span_id, parent_span_id, start_ns, end_ns, "
        "step, status, error_type, error_message) "
        "SELECT concat('k', toString(number)), 'span/1', 'bench', "
        f"concat('job-', toString(number % {JOBS})), "
        f"concat('node', toString(number % {JOBS}), '-', toString(intDiv(number, {JOBS}) % "
        f"{RANKS} DIV 8)), intDiv(number, {JOBS}) % {RANKS}, 0, 0, "
        f"({start_s} + intDiv(number, {per_tick}) * 21600 + 605) * 1000000000, 0, "
        "'checkpoint', 'checkpoint', leftPad(hex(number), 32, '0'), "
        "leftPad(hex(number), 16, '0'), '', "
        f"({start_s} + intDiv(number, {per_tick}) * 21600 + 600) * 1000000000, "
        f"({start_s} + intDiv(number, {per_tick}) * 21600 + 605) * 1000000000, "
        f"intDiv(number, {per_tick}) * 36 + 1, 'ok', '', '' FROM numbers({ckpts * per_tick})",
        settings={"max_partitions_per_insert_block": 1000},
    )
    client.command(
        f"ALTER TABLE {db}.spans UPDATE attributes = map('rankscope.samples', '1024', "
        "'rankscope.tokens', '4194304', 'rankscope.model', "
        "concat('model-', toString(cityHash64(job_id) % 4))) WHERE phase = 'step'",
        settings={"mutations_sync": 2},
    )
    # a mutation fires no materialized view: refill run_span_minute (migration 0017) with the
    # attributes just set, by the migration's own backfill (data arriving live carries them)
    client.command(f"TRUNCATE TABLE {db}.run_span_minute")
    backfill = f"INSERT INTO {db}.run_span_minute"
    mig = next(m for m in available_migrations() if m.version == 17)
    client.command(next(st for st in mig.statements(db) if st.startswith(backfill)))
    client.command(
        f"INSERT INTO {db}.node_inventory (event_id, schema, cluster, job_id, node, rank, "
        "local_rank, gpu, ts_ns, observed_ts_ns, gpu_model, gpu_count, fingerprint) "
        "SELECT concat('i', toString(number)), 'node_inventory/1', 'bench', '', "
        f"concat('node', toString(number % {JOBS}), '-', toString(intDiv(number, {JOBS}))), "
        f"-1, -1, -1, {start_s} * 1000000000, 0, "
        "if(number % 2 = 0, 'NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB'), 8, "
        f"hex(number) FROM numbers({JOBS} * {RANKS // 8})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--clickhouse-url")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/sql_queries.json")
    args = ap.parse_args()
    from contextlib import nullcontext

    from rankscope.services import local_services

    home = ROOT / ".rankscope" / "bench-sql"
    ctx = (
        nullcontext(None)
        if args.clickhouse_url
        else local_services(home, kafka_bootstrap="unused:9092")
    )
    with ctx as eps:
        url = args.clickhouse_url or eps.clickhouse_url  # type: ignore[union-attr]
        client = connect(url, send_receive_timeout=3600)
        db = "bench_sql"
        client.command(f"DROP DATABASE IF EXISTS {db}")
        migrate(client, db)
        now_s = int(time.time())
        start_s = now_s - 7 * 86400
        t0 = time.perf_counter()
        counts = generate(client, db, args.rows, start_s)
        load_s = time.perf_counter() - t0
        print(f"loaded {counts} in {load_s:.0f}s", flush=True)
        hour_end = now_s - 86400  # one hour, a day ago
        job_window = {"job_id": "job-7", "hours": "24", "run_id": "run-7"}
        job_window["price_per_gpu_hour"] = default_price_per_gpu_hour()
        results = []
        total = sum(v for k, v in counts.items() if k != "sample_period_s")
        for name, q in load_queries().items():
            values = {k: v for k, v in job_window.items() if any(p.name == k for p in q.params)}
            times = []
            summary: dict[str, Any] = {}
            for _ in range(3):
                t = time.perf_counter()
                res = client.query(q.sql, parameters=q.bind(values, db))
                times.append(time.perf_counter() - t)
                summary = dict(res.summary)
            results.append(
                {
                    "query": name,
                    "best_s": round(min(times), 3),
                    "runs_s": [round(x, 3) for x in times],
                    "rows_read": int(summary.get("read_rows", 0)),
                    "bytes_read": int(summary.get("read_bytes", 0)),
                    "share_of_stored_rows": round(int(summary.get("read_rows", 0)) / total, 4),
                }
            )
            print(json.dumps(results[-1]), flush=True)
        # the dashboards' one-job one-hour panel, as the plugin sends it
        panel = (
            "SELECT toStartOfInterval(toDateTime(ts), INTERVAL 60 second) AS time, "
            "toString(rank) AS rank, avg(sm_util_pct) AS util "
            f"FROM {db}.gpu_samples WHERE cluster IN ('bench') AND job_id = 'job-7' "
            f"AND ts >= toDateTime({hour_end - 3600}) AND ts <= toDateTime({hour_end}) "
            "GROUP BY time, rank ORDER BY time"
        )
        times = []
        for _ in range(3):
            t = time.perf_counter()
            res = client.query(panel)
            times.append(time.perf_counter() - t)
        read = int(res.summary.get("read_rows", 0))
        results.append(
            {
                "query": "panel: GPU utilisation per rank, one job, one hour",
                "best_s": round(min(times), 3),
                "runs_s": [round(x, 3) for x in times],
                "rows_read": read,
                "bytes_read": int(res.summary.get("read_bytes", 0)),
                "share_of_gpu_samples": round(read / counts["gpu_samples"], 5),
            }
        )
        print(json.dumps(results[-1]), flush=True)
        doc = {"rows": counts, "load_s": round(load_s, 1), "queries": results}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        client.command(f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    main()
