"""Validators for the identifiers an actuator puts into a command line or an API path.

Job ids and node names come from telemetry, which any training process can write, so they are
untrusted: a job id ``--user=alice`` would be an option to ``scancel``, ``101,102,103`` a list,
``gpu[001-512]`` a hostlist range, ``n1/proxy/pods`` another API path. Each scheduler gets a
strict allow-list pattern (ASCII only, length-bounded, matched in full): anything else is
refused before a command or request is built. The functions return the value or raise
``IdentifierError`` (a ``ValueError``), so they also work as pydantic ``AfterValidator``s.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator


class IdentifierError(ValueError):
    """An identifier an actuator must not use; the message never repeats more of it than a
    short, printable prefix."""


_SLURM_JOB = re.compile(r"[0-9]{1,10}(?:[_+][0-9]{1,10})?")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_SLURM_NODE = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")

SLURM_NODE_MAX = 63
DNS_SUBDOMAIN_MAX = 253
DNS_LABEL_MAX = 63


def shown(value: str) -> str:
    """A value as it may appear in a refusal: printable ASCII, at most 40 characters."""
    text = value.encode("ascii", "backslashreplace").decode().replace("\n", "\\n")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def _check(value: str, pattern: re.Pattern[str], max_len: int, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise IdentifierError(f"empty {what}")
    if len(value) > max_len:
        raise IdentifierError(f"{what} {shown(value)} is {len(value)} characters (max {max_len})")
    if not value.isascii() or pattern.fullmatch(value) is None:
        raise IdentifierError(f"{what} {shown(value)} is not a valid {what}")
    return value


def slurm_job_id(value: str) -> str:
    """A Slurm job id: digits, optionally an array task (``123_4``) or het component
    (``123+1``); never an option, a list or an expression."""
    return _check(value, _SLURM_JOB, 21, "Slurm job id")


def slurm_node_name(value: str) -> str:
    """A Slurm node name: one host name (labels of letters, digits and inner hyphens, joined
    by single dots); no hostlist ranges, lists, flags, brackets, commas or whitespace."""
    return _check(value, _SLURM_NODE, SLURM_NODE_MAX, "Slurm node name")


def k8s_node_name(value: str) -> str:
    """A Kubernetes node name: a DNS-1123 subdomain (lowercase, at most 253 characters)."""
    return _check(value, _DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, "Kubernetes node name")


def k8s_namespace(value: str) -> str:
    """A Kubernetes namespace: a DNS-1123 label (lowercase, at most 63 characters)."""
    return _check(value, re.compile(_DNS_LABEL), DNS_LABEL_MAX, "Kubernetes namespace")


def k8s_label_value(value: str) -> str:
    """A Kubernetes label value (the job's pods are selected by it): at most 63 characters,
    letters, digits, ``-_.`` inside, alphanumeric at both ends."""
    return _check(value, _LABEL_VALUE, DNS_LABEL_MAX, "Kubernetes label value")


SlurmJobId = Annotated[str, AfterValidator(slurm_job_id)]
SlurmNodeName = Annotated[str, AfterValidator(slurm_node_name)]
K8sNodeName = Annotated[str, AfterValidator(k8s_node_name)]
K8sNamespace = Annotated[str, AfterValidator(k8s_namespace)]
K8sLabelValue = Annotated[str, AfterValidator(k8s_label_value)]
