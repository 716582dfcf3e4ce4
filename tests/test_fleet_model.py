"""The fleet drift model (streams/analysis/fleet.py): majorities per pool, divergent nodes,
since when, quorum and ties, clearing, and the same findings in any arrival order."""

from __future__ import annotations

import random
from typing import Any

from rankscope.schemas.payloads import NodeInventory, inventory_fingerprint
from rankscope.streams.analysis.fleet import FleetConfig, FleetModel

S = 1_000_000_000


def inv(**changes: Any) -> NodeInventory:
    fields: dict[str, Any] = {
        "driver_version": "535.161.08",
        "cuda_version": "12.2",
        "nccl_version": "2.21.5",
        "kernel": "5.15.0-105-generic",
        "os": "Ubuntu 22.04.4 LTS",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "gpu_vbios": {str(g): "96.00.74.00.0C" for g in range(8)},
        "hca_firmware": {f"mlx5_{h}": "28.39.1002" for h in range(4)},
        "extra": {"arch": "x86_64", "gpu_clocks_applications_mhz": "1980"},
    }
    extra = changes.pop("extra", {})
    fields.update(changes)
    fields["extra"] = {**fields["extra"], **extra}
    return NodeInventory(**fields, fingerprint=inventory_fingerprint(fields))


def model_of(records: list[tuple[str, int, NodeInventory]], **cfg: Any) -> FleetModel:
    m = FleetModel(FleetConfig(**cfg))
    for node, ts, i in records:
        m.observe("c1", node, ts, i)
    return m


def fleet(n: int = 10) -> list[tuple[str, int, NodeInventory]]:
    return [(f"n{k:03d}", 100 * S + k, inv()) for k in range(n)]


def test_a_uniform_pool_has_no_finding() -> None:
    assert model_of(fleet()).findings() == []


def test_the_divergent_node_is_named_with_what_differs_and_since_when() -> None:
    records = fleet()
    records.append(("n003", 500 * S, inv(driver_version="550.54.15")))
    (f,) = model_of(records).findings()
    assert f.node == "n003" and f.pool_size == 10
    assert [(d.attribute, d.value, d.majority) for d in f.differences] == [
        ("driver_version", "550.54.15", "535.161.08")
    ]
    assert f.since_ns == 500 * S
    det = f.detection(emitted_ns=1)
    assert det.detection_type == "node_drift" and det.job_id == "fleet:n003"
    assert det.onset_ts == 500 * S and det.details["value.driver_version"] == "550.54.15"


def test_clocks_in_extra_count_and_serials_do_not() -> None:
    records = fleet()
    records.append(("n001", 300 * S, inv(extra={"gpu_clocks_applications_mhz": "1755"})))
    records += [(f"n{k:03d}", 400 * S, inv(extra={"serial": f"SN{k}"})) for k in range(4, 9)]
    (f,) = model_of(records).findings()
    assert f.node == "n001"
    assert [d.attribute for d in f.differences] == ["extra.gpu_clocks_applications_mhz"]


def test_device_maps_compare_as_sets_of_versions() -> None:
    records = fleet()
    vbios = {str(g): "96.00.74.00.0C" for g in range(8)} | {"7": "96.00.89.00.01"}
    records.append(("n002", 200 * S, inv(gpu_vbios=vbios)))
    (f,) = model_of(records).findings()
    assert f.differences[0].attribute == "gpu_vbios"
    assert f.differences[0].value == "96.00.74.00.0C,96.00.89.00.01"


def test_returning_to_the_majority_clears() -> None:
    records = fleet()
    records.append(("n004", 200 * S, inv(nccl_version="2.19.3")))
    assert [f.node for f in model_of(records).findings()] == ["n004"]
    records.append(("n004", 300 * S, inv()))
    assert model_of(records).findings() == []


def test_since_is_the_first_inventory_of_the_run_not_a_repeat() -> None:
    records = fleet()
    records += [("n005", t * S, inv(kernel="6.5.0-1018")) for t in (200, 250, 900)]
    (f,) = model_of(records).findings()
    assert f.since_ns == 200 * S


def test_a_change_between_two_copies_arriving_last_still_counts() -> None:
    records = fleet()
    records += [("n005", 200 * S, inv(kernel="6.5.0")), ("n005", 400 * S, inv(kernel="6.5.0"))]
    records.append(("n005", 300 * S, inv(kernel="6.8.0")))
    (f,) = model_of(records).findings()
    assert f.differences[0].value == "6.5.0" and f.since_ns == 400 * S


def test_small_pools_and_ties_yield_nothing() -> None:
    small = [*fleet(5), ("n009", 200 * S, inv(driver_version="550.54.15"))]
    assert model_of(small).findings() == []  # 6 nodes < min_pool_size 8
    tie = fleet(5) + [(f"m{k}", 200 * S, inv(driver_version="550.54.15")) for k in range(5)]
    assert model_of(tie).findings() == []  # 5 vs 5: no majority, no finding


def test_pools_are_separate() -> None:
    h100 = fleet(10)
    a100 = [(f"a{k}", 100 * S, inv(gpu_model="NVIDIA A100-SXM4-80GB", driver_version="525.1"))
            for k in range(9)]  # fmt: skip
    labelled = [(f"p{k}", 100 * S, inv(extra={"pool": "eval"}, kernel="6.1")) for k in range(3)]
    found = model_of(h100 + a100 + labelled).findings()
    assert found == []  # a100s differ from the h100s, but in their own pool; "eval" is small


def test_since_is_when_the_majority_formed_for_a_node_left_behind() -> None:
    """Nine of ten nodes upgraded at 100+k s: the laggard diverges from the sixth upgrade,
    which gave the new driver its strict majority."""
    records = [(f"n{k:03d}", 10 * S, inv(driver_version="525.1")) for k in range(10)]
    records += [(f"n{k:03d}", (100 + k) * S, inv()) for k in range(9)]
    (f,) = model_of(records).findings()
    assert f.node == "n009" and f.since_ns == 105 * S


def test_same_findings_in_any_arrival_order_at_64_nodes() -> None:
    drifted = {
        7: inv(driver_version="550.54.15"),
        21: inv(nccl_version="2.19.3"),
        42: inv(extra={"gpu_clocks_applications_mhz": "1755"}),
    }
    records = [(f"n{k:03d}", (100 + k) * S, inv()) for k in range(64)]
    # the drifted nodes change at 500+k s, and every agent re-sends what it runs at 3000+k s
    records += [(f"n{k:03d}", (500 + k) * S, i) for k, i in drifted.items()]
    records += [(f"n{k:03d}", (3000 + k) * S, drifted.get(k, inv())) for k in range(64)]
    expected = model_of(records).findings()
    assert [(f.node, f.differences[0].attribute, f.since_ns) for f in expected] == [
        ("n007", "driver_version", 507 * S),
        ("n021", "nccl_version", 521 * S),
        ("n042", "extra.gpu_clocks_applications_mhz", 542 * S),
    ]
    for seed in range(5):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        got = model_of(shuffled + shuffled[:10]).findings()  # and some delivered twice
        assert got == expected
        assert [f.detection(0) for f in got] == [f.detection(0) for f in expected]
