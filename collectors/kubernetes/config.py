"""What the Kubernetes collector can be told (the agent's ``kubernetes:`` section): where the
API server is, how to authenticate, and what to watch."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rankscope.collectors.base import CollectorConfig
from rankscope.collectors.runs import RunRule

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubernetesCollectorConfig(CollectorConfig):
    """Where the API server is, how to authenticate, and what to watch."""

    #: e.g. https://10.0.0.1:6443; None = kubeconfig if given, else in-cluster
    #: (KUBERNETES_SERVICE_HOST/PORT)
    api_url: str | None = None
    token_path: Path = SA_DIR / "token"
    ca_path: Path | None = SA_DIR / "ca.crt"
    kubeconfig: Path | None = None
    #: kubeconfig context; None = its current-context
    context: str | None = None
    insecure_skip_tls_verify: bool = False
    #: None = all namespaces
    namespace: str | None = None
    label_selector: str = ""
    #: watch only the pods on this node (fieldSelector spec.nodeName) and only this node
    node_name: str | None = None
    watch_nodes: bool = True
    watch_events: bool = True
    #: server-side end of each watch (timeoutSeconds); the watch is then resumed
    watch_timeout_s: int = Field(default=300, ge=1)
    #: connect and read timeout of list calls; a watch read waits watch_timeout_s plus this
    request_timeout_s: float = Field(default=30.0, gt=0)
    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    #: items per list page (limit/continue)
    page_limit: int = Field(default=500, ge=1)
    job_label: str = "training.kubeflow.org/job-name"
    rank_labels: list[str] = Field(
        default_factory=lambda: [
            "training.kubeflow.org/replica-index",
            "batch.kubernetes.io/job-completion-index",
        ]
    )
    rank_env: list[str] = Field(default_factory=lambda: ["RANK"])
    #: which run a job's pods belong to (collectors/runs.py; default: the job name, so every
    #: restart of a PyTorchJob is one run); the attempt is the container's restartCount + 1
    runs: RunRule = Field(default_factory=RunRule)
