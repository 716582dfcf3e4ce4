"""The light mode runs without Presidio and spaCy (issue 18 point 5): the agent-only install
has neither, and source redaction is on by default. A subprocess makes importing them fail,
then builds the agent's ``SourceRedaction`` and redacts a line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# GitHub's documented classic-token shape (ghp_ + 36 base62, docs/redaction-formats.md), a value
# generated for the tests; Stripe's documented Visa test card number (docs.stripe.com/testing);
# +1 201-555-0195, a number of the 555-01xx range the NANP reserves for fiction. The line is the
# shape of NCCL's "NET/IB : Got completion ... with error" warning (tests/test_nccl_log.py).
SCRIPT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    BLOCKED = ("presidio_analyzer", "presidio_anonymizer", "spacy")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    from rankscope.redaction.source import SourceRedaction, SourceRedactionConfig
    from tests.factories import comm

    token = "ghp_R8vKq2LmX7tZp4WnY9cBd3HfJs6GaE1uQo5V"
    line = (
        "node001:12345:12389 [3] NCCL INFO NET/IB : Got completion from peer 10.0.3.7<43210> "
        f"with error 12 (export GITHUB_TOKEN={token}; card 4242 4242 4242 4242; "
        "on-call +1 201-555-0195)"
    )
    source = SourceRedaction(SourceRedactionConfig(), stage="agent", origin="node001")
    (event,), audit = source.apply([comm(line)])
    print(json.dumps({
        "text": event.payload.message,
        "entities": sorted({a.entity for a in audit if a.action == "mask"}),
        "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
    }))
    """
)


def test_source_redaction_builds_and_redacts_with_presidio_and_spacy_unimportable() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}  # no redaction key: mask only
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    text = out["text"]
    assert "ghp_" not in text and "4242" not in text and "555-0195" not in text
    assert "[API_TOKEN]" in text and "[CREDIT_CARD]" in text and "[PHONE_NUMBER]" in text
    assert out["entities"] == ["API_TOKEN", "CREDIT_CARD", "PHONE_NUMBER"]
    assert "10.0.3.7" in text  # a hash entity: without a key, left to the stream stage
