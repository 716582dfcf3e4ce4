"""Issue 14, unit level: hostile identifiers never reach a command or request, decisions and
commands are signed and the runner refuses the rest, dry_run runs nothing, invented ids do
not dilute the breaker, and webhook URLs are redacted."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rankscope.schemas.derived import Incident, RecoveryControl, RecoveryEvent, RecoveryInput
from rankscope.sinks.actuators.base import ActuatorRunner, Ledger
from rankscope.sinks.actuators.cluster import KubernetesActuator, KubernetesConfig, SlurmActuator
from rankscope.sinks.actuators.identifiers import (
    IdentifierError,
    k8s_label_value,
    k8s_namespace,
    k8s_node_name,
    slurm_job_id,
    slurm_node_name,
)
from rankscope.sinks.actuators.webhook import WebhookActuator, WebhookConfig, redact_url
from rankscope.streams.recovery.decider import Decider
from rankscope.streams.recovery.engine import RecoveryEngine
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.recovery.signing import Keyring, load_keyring, parse_keys
from tests.test_cluster_actuators import _ApiServer, _Recorder

S = 1_000_000_000
CYRILLIC_A = "\u0430"  # looks like Latin 'a'
#: what a training process could put into its job id or node name (issue 14's list and more)
HOSTILE = [
    "--user=alice",
    "101,102,103",
    "gpu[001-512]",
    "n1/proxy/pods",
    "node003\n",
    "81234\n",
    "81234\nscancel 1",
    "..",
    "../../etc",
    f"gpu-{CYRILLIC_A}01",
    f"8123{chr(0x0664)}",  # an Arabic-Indic digit four
    "a" * 300,
    "1" * 300,
    "-n",
    "node 003",
    "node003;reboot",
    "",
]
KEYS = parse_keys("k1:" + "1" * 32)


def _decision(
    action: str, job: str = "81234", node: str = "node003", **kw: object
) -> RecoveryEvent:
    return RecoveryEvent(
        key=RecoveryEvent.make_key(job, node, action),
        stage="decided",
        action=action,  # type: ignore[arg-type]
        cluster="c1",
        job_id=job,
        node=node,
        rule="test",
        reason="test",
        trigger_id="inc1",
        attempt=1,
        ts=1,
        mode="act",
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("value", HOSTILE)
def test_every_validator_refuses_hostile_values(value: str) -> None:
    for check in (slurm_job_id, slurm_node_name, k8s_node_name, k8s_label_value, k8s_namespace):
        with pytest.raises(IdentifierError) as err:
            check(value)
        assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_valid_identifiers_pass() -> None:
    for job in ("81234", "123_4", "123+1"):
        assert slurm_job_id(job) == job
    for node in ("node003", "gpu-a01", "gpu-a01.cluster.local"):
        assert slurm_node_name(node) == node and k8s_node_name(node) == node
    assert k8s_label_value("llama-70b_run.3") == "llama-70b_run.3"
    assert k8s_namespace("training") == "training"
    with pytest.raises(IdentifierError):
        k8s_node_name("Node003")  # DNS-1123 is lowercase


@pytest.mark.parametrize("value", HOSTILE)
def test_slurm_runs_nothing_for_a_hostile_job_or_node(value: str) -> None:
    for action, job, node in [
        ("restart_from_checkpoint", value, "node003"),
        ("dump_stacks", value, "node003"),
        ("exclude_node_and_restart", value, "node003"),
        ("exclude_node_and_restart", "81234", value),
        ("drain_node", "", value),
    ]:
        rec = _Recorder()
        result = SlurmActuator(run=rec).execute(_decision(action, job, node))
        if node == "":  # a node action without a node: not an identifier, still nothing runs
            assert not result.ok and "needs a node" in result.detail
        else:
            assert result.refused and result.detail.startswith("refused: "), (action, value)
        assert rec.calls == []


@pytest.fixture
def api() -> Iterator[_ApiServer]:
    server = _ApiServer()
    yield server
    server.server.shutdown()


def _k8s(api: _ApiServer, tmp_path: Path) -> KubernetesActuator:
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    cfg = KubernetesConfig(api_server=api.url, token_file=token, ca_file=None, namespace="train")
    return KubernetesActuator(cfg)


def test_kubernetes_sends_nothing_for_hostile_values(api: _ApiServer, tmp_path: Path) -> None:
    k8s = _k8s(api, tmp_path)
    for value in HOSTILE:
        for action, job, node in [
            ("restart_from_checkpoint", value, "node003"),
            ("exclude_node_and_restart", "81234", value),
            ("drain_node", "", value),
        ]:
            result = k8s.execute(_decision(action, job, node))
            assert result.refused, (action, value, result)
    assert api.requests == []
    with pytest.raises(ValueError):
        KubernetesConfig(namespace="kube-system/pods/x")


def test_the_scheduler_must_confirm_the_job_and_node(api: _ApiServer, tmp_path: Path) -> None:
    """A valid-looking id the scheduler does not report is refused before anything changes."""

    class Unknown(_Recorder):
        def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            self.calls.append(list(argv))
            if argv[3] == "job" and argv[4] == "99999":
                return subprocess.CompletedProcess(list(argv), 1, "", "Invalid job id specified")
            if argv[3] == "job":  # another job answers: not the one named
                return subprocess.CompletedProcess(list(argv), 0, "JobId=1 JobName=x\n", "")
            return subprocess.CompletedProcess(list(argv), 0, "NodeName=other Arch=x\n", "")

    for job in ("99999", "81234"):
        rec = Unknown()
        result = SlurmActuator(run=rec).execute(_decision("restart_from_checkpoint", job))
        assert result.refused and "does not report job" in result.detail
        assert all(c[1:3] == ["-o", "show"] for c in rec.calls)  # only the read-only check
    rec = Unknown()
    assert SlurmActuator(run=rec).execute(_decision("drain_node", "", "node007")).refused
    assert all(c[1:3] == ["-o", "show"] for c in rec.calls)

    class Array(_Recorder):
        def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            self.calls.append(list(argv))
            out = "JobId=125 ArrayJobId=123 ArrayTaskId=4 JobState=RUNNING\n"
            return subprocess.CompletedProcess(list(argv), 0, out if argv[1] == "-o" else "", "")

    rec = Array()
    assert SlurmActuator(run=rec).execute(_decision("dump_stacks", "123_4")).ok
    assert rec.calls[-1] == ["scancel", "--signal=USR1", "123_4"]

    k8s = _k8s(api, tmp_path)
    result = k8s.execute(_decision("exclude_node_and_restart", "81234", "node999"))
    assert result.refused and "does not report node node999" in result.detail
    result = k8s.execute(_decision("restart_from_checkpoint", "55555"))
    assert result.refused and "no pods of job 55555" in result.detail
    assert {r["method"] for r in api.requests} == {"GET"}


def test_dry_run_runs_nothing(api: _ApiServer, tmp_path: Path) -> None:
    rec = _Recorder()
    dry = _decision("exclude_node_and_restart").model_copy(update={"mode": "dry_run"})
    result = SlurmActuator(run=rec).execute(dry)
    assert result.ok and rec.calls == []
    assert result.detail == (
        "dry run: would run scontrol update NodeName=node003 State=DRAIN "
        "'Reason=rankscope: test'; scontrol requeue 81234; "
        "scontrol update JobId=81234 ExcNodeList=node003"
    )
    k8s = _k8s(api, tmp_path)
    result = k8s.execute(dry)
    assert result.ok and result.detail.startswith("dry run: would send PATCH /api/v1/nodes/node003")
    assert api.requests == []
    # the runner's flag makes a decision decided in act mode a dry run too
    runner = ActuatorRunner(SlurmActuator(run=rec), Ledger(tmp_path / "l.db"), dry_run=True)
    out = runner.run(_decision("drain_node"))
    assert out is not None and out.stage == "succeeded" and "dry run" in out.reason
    assert rec.calls == []


def _signed(keys: Keyring, d: RecoveryEvent, now: int) -> RecoveryEvent:
    return keys.sign(d.model_copy(update={"decided_at": now}))


def test_the_runner_refuses_unsigned_forged_expired_and_replayed(tmp_path: Path) -> None:
    now = 1_900_000_000 * S
    rec = _Recorder()

    def runner() -> ActuatorRunner:  # a new process each time: the ledger file persists
        return ActuatorRunner(SlurmActuator(run=rec), Ledger(tmp_path / "l.db"), KEYS, 600)

    genuine = _signed(KEYS, _decision("restart_from_checkpoint"), now)
    unsigned = genuine.model_copy(update={"signature": ""})
    forged = genuine.model_copy(update={"job_id": "81235"})  # signed for another job
    other_key = _signed(parse_keys("k9:" + "9" * 32), _decision("drain_node"), now)
    expired = _signed(KEYS, _decision("drain_node"), now - 601 * S)
    for bad, why in [
        (unsigned, "refused: unsigned"),
        (forged, "refused: forged"),
        (other_key, "refused: signed with an unknown key id"),
        (expired, "refused: expired"),
    ]:
        out = runner().run(bad, now_ns=now, source="t/0/1")
        assert out is not None and out.stage == "refused" and why in out.reason, out
        assert out.signature == ""
    assert rec.calls == []
    ok = runner().run(genuine, now_ns=now, source="t/0/2")
    assert ok is not None and ok.stage == "succeeded"
    assert rec.calls[-1] == ["scontrol", "requeue", "81234"] and len(rec.calls) == 2
    # read again from the same record (Kafka redelivery): the stored outcome, nothing runs
    again = runner().run(genuine, now_ns=now, source="t/0/2")
    assert again is not None and (again.key, again.stage) == (ok.key, "succeeded")
    # the same record written again (a replay), read by a restarted runner: refused
    replay = runner().run(genuine, now_ns=now + S, source="t/1/7")
    assert replay is not None and replay.stage == "refused" and replay.key != genuine.key
    assert "replayed" in replay.reason and genuine.key in replay.reason
    assert len(rec.calls) == 2
    # a backoff extends the age limit: decided long ago, but it may run only now
    later = _decision("dump_stacks").model_copy(update={"ts": 1, "not_before_ts": 1 + 3600 * S})
    waited = runner().run(_signed(KEYS, later, now - 3700 * S), now_ns=now, source="t/0/3")
    assert waited is not None and waited.stage == "succeeded"


def test_keys_rotate_and_are_created_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = "old:" + "a" * 32, "new:" + "b" * 32
    signed_old = parse_keys(old).sign(_decision("drain_node"))
    rotated = parse_keys(f"{new},{old}")  # the new key signs, the old one still verifies
    assert rotated.current_id == "new" and rotated.check(signed_old) is None
    assert parse_keys(old).check(rotated.sign(_decision("drain_node"))) is not None
    with pytest.raises(ValueError, match="at least"):
        parse_keys("short")
    monkeypatch.delenv("RANKSCOPE_RECOVERY_KEY", raising=False)
    monkeypatch.delenv("RANKSCOPE_RECOVERY_KEY_FILE", raising=False)
    path = tmp_path / "home" / "recovery.key"
    first = load_keyring(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_keyring(path) == first  # reused, not replaced
    monkeypatch.setenv("RANKSCOPE_RECOVERY_KEY", new)
    assert load_keyring(path).current_id == "new"


def _incident(job: str, at_s: int, node: str = "node003") -> RecoveryInput:
    ts = 1_800_000_000 * S + at_s * S
    return RecoveryInput(
        incident=Incident(
            incident_id=f"{job}/inc", revision=0, cluster="c1", job_id=job,
            cause_class="application", node=node, rank=0, confidence=0.9, summary="x",
            first_cause_ts=ts, first_symptom_ts=ts, attributed_ts=ts, emitted_ts=ts,
        )
    )  # fmt: skip


def test_the_decider_signs_and_obeys_only_signed_commands() -> None:
    decider = Decider(load_policy(), KEYS)
    unsigned = RecoveryControl(paused=True, by="mallory", ts=1)
    (refused,) = decider.feed(RecoveryInput(control=unsigned))
    assert refused.stage == "refused" and "unsigned" in refused.reason
    (decided,) = decider.feed(_incident("job1", 10))
    assert decided.stage == "decided" and decided.mode == "dry_run"  # the shipped policy
    assert KEYS.check(decided) is None and decided.decided_at > 0
    assert decider.feed(RecoveryInput(control=KEYS.sign(unsigned))) == []
    (held,) = decider.feed(_incident("job2", 20))
    assert held.stage == "suppressed" and "paused" in held.reason


def test_invented_ids_do_not_dilute_the_breaker() -> None:
    """A writer of telemetry invents 5,000 jobs and nodes; a real fleet-wide failure still
    trips the breaker as if they did not exist (the denominator is the configured fleet, or
    the conservative default when none is configured)."""
    base = load_policy()
    for fleet, trips_at in ((20, 6), (None, 4)):
        policy = base.model_copy(
            update={
                "breaker": base.breaker.model_copy(update={"fleet_jobs": fleet}),
                "rules": [r for r in base.rules if not r.per_node],
            }
        )
        engine = RecoveryEngine(policy)
        t0 = 1_800_000_000 * S
        for j in range(5000):  # progress notes of invented jobs on invented nodes
            engine.on_progress("c1", f"fake{j}", 5, t0 + 690 * S, nodes=[f"fakenode{j}"])
        out: list[RecoveryEvent] = []
        for j in range(8):
            inc = _incident(f"job{j}", 700 + j).incident
            assert inc is not None
            out += engine.on_incident(inc)
        decided = [e.job_id for e in out if e.stage == "decided" and e.action != "escalate"]
        assert len(decided) == trips_at - 1, (fleet, decided)
        (breaker,) = [e for e in out if e.rule == "circuit-breaker"]
        assert f"{trips_at} of {fleet or trips_at} jobs" in breaker.reason


def test_webhook_urls_are_redacted(tmp_path: Path) -> None:
    url = "https://bot:s3cr3t@hooks.example.com:8443/services/T000/B000/XXXXSECRET?token=abc"
    red = redact_url(url)
    assert red.startswith("https://hooks.example.com:8443/...#") and len(red) < 60
    for secret in ("s3cr3t", "bot", "XXXXSECRET", "services", "token=abc"):
        assert secret not in red
    assert redact_url(url) == red and redact_url(url + "x") != red
    # an endpoint that does not answer: the error names the endpoint only by its redacted form
    dead = "http://127.0.0.1:9/hook/SECRETPATH?key=SECRETQ"
    act = WebhookActuator(WebhookConfig(url=dead, retries=0, timeout_s=1), secret=b"k" * 16)
    result = act.execute(_decision("escalate"))
    assert not result.ok and "SECRET" not in result.detail and redact_url(dead) in result.detail
    for bad in ("http://bot:SECRETPW@127.0.0.1:9/x", "http://127.0.0.1:SECRETPORT/x"):
        act = WebhookActuator(WebhookConfig(url=bad, retries=0, timeout_s=1), secret=b"k" * 16)
        result = act.execute(_decision("escalate"))  # errors that quote the URL's parts
        assert not result.ok and "SECRET" not in result.detail, result.detail
    with pytest.raises(ValueError) as err:
        WebhookActuator(WebhookConfig(url="ftp://x/SECRETPATH"), secret=b"k" * 16)
    assert "SECRET" not in str(err.value)


def test_a_dry_run_line_cannot_be_split_by_a_hostile_id() -> None:
    from rankscope.sinks.actuators.dryrun import DryRunActuator

    result = DryRunActuator().execute(_decision("drain_node", "81234\nFAKE", "n1\r\nFAKE"))
    assert (
        "\n" not in result.detail and "\r" not in result.detail and "81234\\nFAKE" in result.detail
    )
