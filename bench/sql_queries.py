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

from sinks.clickhouse import connect, migrate
from sinks.named_queries import load_queries

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
    counts = {
        t: int(client.query(f"SELECT count() FROM {db}.{t}").result_rows[0][0])
        for t in ("gpu_samples", "spans")
    }
    return counts | {"sample_period_s": period}


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
        job_window = {"job_id": "job-7"}
        results = []
        total = counts["gpu_samples"]
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
                    "share_of_gpu_samples": round(int(summary.get("read_rows", 0)) / total, 4),
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
                "share_of_gpu_samples": round(read / total, 4),
            }
        )
        print(json.dumps(results[-1]), flush=True)
        doc = {"rows": counts, "load_s": round(load_s, 1), "queries": results}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        client.command(f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    main()
