"""The XID catalogue as data (issue 17): it loads, every code is there once with a known bucket,
the codes root cause knew before keep their meaning, and the recovery policy's rules act on the
catalogue's bucket."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rankscope.collectors.base import EventFactory
from rankscope.collectors.kernel_log import (
    KernelLogCollector,
    KernelLogCollectorConfig,
    KernelLogGpu,
)
from rankscope.schemas.derived import CauseClass, Incident
from rankscope.schemas.xid_catalogue import (
    SEVERITY_BY_BUCKET,
    XID_BUCKETS,
    load_xid_catalogue,
    xid_bucket,
    xid_catalogue,
)
from rankscope.streams.analysis.rootcause import XID_INFO, xid_description
from rankscope.streams.analysis.rootcause.xid import UNKNOWN_XID
from rankscope.streams.recovery.engine import RecoveryEngine
from rankscope.streams.recovery.policy import Match, Policy, load_policy

#: root cause's hand-written table before the catalogue (commit e77a94a): (cause, strength, fatal)
OLD_TABLE = {
    13: ("gpu_xid", 0.35, False),
    31: ("gpu_xid", 0.35, False),
    43: ("gpu_xid", 0.3, False),
    45: ("gpu_xid", 0.15, False),
    48: ("gpu_ecc", 1.0, True),
    61: ("gpu_xid", 0.8, False),
    62: ("gpu_xid", 0.95, True),
    63: ("gpu_ecc", 0.5, False),
    64: ("gpu_ecc", 0.85, False),
    74: ("nvlink", 1.0, True),
    79: ("gpu_xid", 1.0, True),
    92: ("gpu_ecc", 0.3, False),
    94: ("gpu_ecc", 0.9, True),
    95: ("gpu_ecc", 1.0, True),
    119: ("gpu_xid", 0.95, True),
    120: ("gpu_xid", 0.95, True),
}


def test_shipped_catalogue_loads_with_every_code_once() -> None:
    cat = load_xid_catalogue()
    codes = [e.code for e in cat.xids]
    assert len(codes) == len(set(codes))
    # NVIDIA's table numbers its codes 1..161 without gaps (Ampere and newer)
    assert set(codes) == set(range(1, 162))
    assert {e.bucket for e in cat.xids} <= XID_BUCKETS
    # the GB200-era codes are there, with the catalogue's NVLink5 workflow
    for code in range(144, 151):
        assert cat.by_code[code].bucket == "WORKFLOW_NVLINK5_ERR"
        assert cat.by_code[code].cause == "nvlink"
    assert cat.by_code[154].mnemonic == "GPU_RECOVERY_ACTION_CHANGED"


def test_buckets_of_the_codes_operators_act_on() -> None:
    expected = {
        79: "RESTART_BM",
        48: "WORKFLOW_XID_48",
        74: "WORKFLOW_NVLINK_ERR",
        63: "IGNORE",
        94: "RESTART_APP",
        95: "RESET_GPU",
        119: "RESET_GPU",
        13: "RESTART_APP",
        45: "WORKFLOW_XID_45",
        54: "CHECK_MECHANICALS",
        154: "XID_154",
    }
    assert {c: xid_bucket(c) for c in expected} == expected
    assert xid_bucket(None) == "" and xid_bucket(9999) == ""


def test_severity_follows_the_documented_rule() -> None:
    for e in load_xid_catalogue().xids:
        want = "info" if e.unused else SEVERITY_BY_BUCKET[e.bucket]
        assert e.severity == want, e.code


def test_codes_we_had_keep_their_meaning() -> None:
    for code, (cause, strength, fatal) in OLD_TABLE.items():
        info = XID_INFO[code]
        assert (info.cause, info.strength, info.fatal) == (cause, strength, fatal), code
    assert xid_description(79) == "XID 79 (GPU has fallen off the bus)"
    assert xid_description(999) == "XID 999"
    assert 999 not in XID_INFO and UNKNOWN_XID.strength == 0.6


def test_new_codes_get_attribution_from_their_bucket() -> None:
    # 149 (GB200 NVLink) used to fall back to the generic 0.6 non-fatal XID
    assert XID_INFO[149][1:] == ("nvlink", 0.95, True, "WORKFLOW_NVLINK5_ERR")
    assert XID_INFO[160].fatal and XID_INFO[160].bucket == "RESTART_BM"
    assert XID_INFO[140].cause == "gpu_ecc" and XID_INFO[140].fatal
    assert not XID_INFO[154].fatal and XID_INFO[154].strength < 0.6
    assert XID_INFO[14].strength == 0.05  # IGNORE: an injected test error
    assert len(XID_INFO) == len(xid_catalogue())


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            "version: x\nxids:\n  - {code: 1, mnemonic: A, description: d, bucket: RESTART_APP,"
            " severity: warning}\n  - {code: 1, mnemonic: B, description: d, bucket: IGNORE,"
            " severity: info}\n",
            "duplicate XID codes: [1]",
        ),
        (
            "version: x\nxids:\n  - {code: 2, mnemonic: A, description: d, bucket: REBOOT_PLEASE,"
            " severity: critical}\n",
            "bucket",
        ),
        ("- just a list\n", "YAML mapping"),
    ],
)
def test_malformed_catalogue_is_refused_with_the_reason(
    tmp_path: Path, body: str, reason: str
) -> None:
    path = tmp_path / "cat.yaml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        load_xid_catalogue(path)


# ============================================================================ recovery policy

S = 1_000_000_000
T0 = 1_800_000_000 * S


def _incident(
    job: str, xid: int | None, cause: CauseClass = "gpu_xid", conf: float = 0.95
) -> Incident:
    return Incident(
        incident_id=f"{job}/inc0",
        cluster="c1",
        job_id=job,
        cause_class=cause,
        node=f"node-{job}",
        gpu=2,
        rank=26,
        xid=xid,
        confidence=conf,
        summary=f"XID {xid} on node-{job}",
        first_cause_ts=T0,
        first_symptom_ts=T0,
        attributed_ts=T0,
        emitted_ts=T0,
    )


def _acts(inc: Incident) -> list[tuple[str, str]]:
    """(rule, action) the shipped policy decides, on a fresh engine (no breaker, no repeats)."""
    got = [e for e in RecoveryEngine(load_policy()).on_incident(inc) if e.stage == "decided"]
    assert all(e.node == inc.node for e in got)
    return [(e.rule, e.action) for e in got]


def test_shipped_policy_acts_on_the_catalogue_bucket() -> None:
    # a reboot-bucket XID: the job restarts without the node, and the node is drained at once
    assert _acts(_incident("j79", 79)) == [
        ("xid-hardware-exclude-node", "exclude_node_and_restart"),
        ("xid-reboot-drain-node", "drain_node"),
    ]
    # a reset-bucket XID (GSP timeout) and GB200 NVLink: exclude, no drain
    assert _acts(_incident("j119", 119)) == [
        ("xid-hardware-exclude-node", "exclude_node_and_restart")
    ]
    assert _acts(_incident("j149", 149, "nvlink")) == [
        ("xid-hardware-exclude-node", "exclude_node_and_restart")
    ]
    # an app-bucket XID: the GPU is usable, the job restarts from its checkpoint in place
    assert _acts(_incident("j94", 94, "gpu_ecc")) == [
        ("xid-app-restart", "restart_from_checkpoint")
    ]
    # no XID (ECC counter, silence...): the cause-class rules, as before
    assert _acts(_incident("jnone", None)) == [
        ("gpu-hardware-exclude-node", "exclude_node_and_restart")
    ]
    # an IGNORE-bucket XID at high confidence still falls through to the cause rule
    assert _acts(_incident("j63", 63, "gpu_ecc"))[0][0] == "gpu-hardware-exclude-node"


def test_bucket_and_cause_must_both_hold_when_both_are_named() -> None:
    m = Match(incident_cause=["gpu_ecc"], xid_bucket=["RESET_GPU"], min_confidence=0.8)
    assert m.matches_incident(_incident("a", 95, "gpu_ecc"))
    assert not m.matches_incident(_incident("b", 95, "gpu_xid"))  # cause differs
    assert not m.matches_incident(_incident("c", 48, "gpu_ecc"))  # WORKFLOW_XID_48
    assert not m.matches_incident(_incident("d", 95, "gpu_ecc", conf=0.5))
    assert not m.matches_incident(_incident("e", None, "gpu_ecc"))


@pytest.mark.parametrize(
    ("when", "reason"),
    [
        ({"xid_bucket": ["RESET_GPU"], "detection": ["hang"]}, "exactly one of them"),
        ({"xid_bucket": ["REBOOT_PLEASE"]}, "xid_bucket"),
        ({"incident_cause": ["gpu_xid"], "node_repeats": 1}, "only with xid_bucket"),
    ],
)
def test_policy_refuses_bad_bucket_rules(when: dict[str, object], reason: str) -> None:
    doc = {"version": "t", "rules": [{"name": "r", "when": when, "action": "drain_node"}]}
    with pytest.raises(ValidationError, match=reason):
        Policy.model_validate(doc)


# ============================================================================ kernel lines

#: a GSP crash as the driver logs it (forums.developer.nvidia.com, "Xid 62 / Xid 154 GSP PMU halt
#: crash on RTX PRO 6000 Blackwell during LLM inference", 2026; as posted, a host name added to
#: the syslog prefix):
#: XID 120 (GSP error) and XID 154 restating the recovery action it needs
GSP_CRASH = [
    "Mar 29 15:38:59 host kernel: NVRM: Xid (PCI:0000:01:00): 120, GSP kernel exception: store "
    "access page fault (cause:0xf) @ pc:0xffffffff93003d42, partition:4#0",
    "Mar 29 15:38:59 host kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed "
    "from 0x0 (None) to 0x1 (GPU Reset Required)",
]


def test_a_gsp_crash_carries_the_buckets_and_154_does_not_outweigh_its_cause(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(line + "\n" for line in GSP_CRASH))
    config = KernelLogCollectorConfig(
        source="file",
        paths=[str(log)],
        from_start=True,
        use_nvml=False,
        inventory=[KernelLogGpu(pci_bus_id="0000:01:00.0", index=0)],
    )
    events = KernelLogCollector(config, EventFactory("c1", "n1")).poll(T0)
    got = [(e.gpu, e.payload.xid, e.payload.xid_bucket) for e in events]  # type: ignore[union-attr]
    assert got == [(0, 120, "RESET_GPU"), (0, 154, "XID_154")]
    # root cause: 120 is the fatal cause; 154 only restates it, weaker than the unknown-XID weight
    assert XID_INFO[120].fatal and XID_INFO[120].strength > XID_INFO[154].strength
    assert not XID_INFO[154].fatal
