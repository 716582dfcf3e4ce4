"""The fleet drift queries on the SQL bench's derived tables (16.5M rank windows over a week,
three node_drift findings), timed against slowest_ranks in the same run (the machine is shared:
compare ratios, not seconds).

    .venv/bin/python bench/drift_queries.py --out bench/results/drift_queries.json
    .venv/bin/python bench/drift_queries.py --compare OLD_DIR   # also OLD_DIR/drift_slowdown.sql

Only the derived tables are generated (``sql_queries._derived``), not the 100M GPU samples: the
drift queries read detections and rank_windows only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sql_queries import JOBS, RANKS, _derived  # noqa: E402

from rankscope.services import local_services  # noqa: E402
from rankscope.sinks.clickhouse import connect, migrate  # noqa: E402
from rankscope.sinks.named_queries import NamedQuery, load_queries, parse  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/drift_queries.json")
    ap.add_argument("--compare", type=Path, help="a folder with an earlier drift_slowdown.sql")
    args = ap.parse_args()
    with local_services(ROOT / ".rankscope" / "bench-drift", kafka_bootstrap="unused:9092") as eps:
        client = connect(eps.clickhouse_url, send_receive_timeout=3600)
        db = "bench_drift"
        client.command(f"DROP DATABASE IF EXISTS {db}")
        migrate(client, db)
        t0 = time.perf_counter()
        _derived(client, db, int(time.time()) - 7 * 86400, JOBS * RANKS)
        load_s = time.perf_counter() - t0
        qs = load_queries()
        cases: list[tuple[str, NamedQuery, dict[str, str]]] = [
            ("slowest_ranks", qs["slowest_ranks"], {"job_id": "job-7", "hours": "24"}),
            ("fleet_drift", qs["fleet_drift"], {}),
            ("drift_slowdown", qs["drift_slowdown"], {}),
        ]
        if args.compare:
            cases.append(
                ("drift_slowdown (compared)", parse(args.compare / "drift_slowdown.sql"), {})
            )
        out: list[dict[str, Any]] = []
        for name, q, values in cases:
            times = []
            for _ in range(3):
                t = time.perf_counter()
                res = client.query(q.sql, parameters=q.bind(values, db))
                times.append(time.perf_counter() - t)
            out.append(
                {
                    "query": name,
                    "best_s": round(min(times), 3),
                    "runs_s": [round(x, 3) for x in times],
                    "rows_read": int(res.summary.get("read_rows", 0)),
                    "result_rows": len(res.result_rows),
                }
            )
            print(json.dumps(out[-1]), flush=True)
        base = out[0]["best_s"]
        for r in out:
            r["vs_slowest_ranks"] = round(r["best_s"] / base, 1)
        args.out.write_text(json.dumps({"load_s": round(load_s), "queries": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
