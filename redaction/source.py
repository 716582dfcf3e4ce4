"""Redaction at the source: what the node agent and the OTel exporter run before publishing.

Why here too: the raw topics keep what producers write for their whole retention, readable by
anyone with read access to them; the stream stage only protects what comes after it (issue 16).
This is the stream's own stage (``RedactionStage``: field policy, per-field cache, quarantine,
audit counts) over the light redactor, so a value is replaced by the same token at the source
as downstream, and the stream stage, which leaves earlier replacement tokens alone (the
``redaction_placeholder`` allow rule), stays the second line for what the source could not do
(NER, hash entities without a key, producers that do not redact). The counts travel as report
events on the raw topic (``source_audit``).

Fail closed: a value that cannot be redacted empties every scanned field of its event to
``[QUARANTINED]`` (the stage's marker); if the stage itself fails, every scanned field of the
batch is emptied the same way, and if even that fails the batch is dropped and counted. Text is
never published raw because redaction went wrong.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from rankscope.extras import missing_extra
from rankscope.redaction.keys import load_key
from rankscope.redaction.rules import load_rules
from rankscope.redaction.source_audit import ReportEventFactory, report_payloads
from rankscope.schemas.derived import RedactionAudit, RedactionStageName
from rankscope.schemas.events import Event

if TYPE_CHECKING:  # the rules' regexes are compiled when redaction is built, not with the configs
    from rankscope.redaction.light import LightRedactor

__all__ = ["SourceRedaction", "SourceRedactionConfig", "SourceRedactionStats"]

log = logging.getLogger("rankscope.redaction")


class SourceRedactionConfig(BaseModel):
    """The ``redaction:`` section of the agent config and of the OTel exporter config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True,
        description="Redact free text before publishing (light mode, no NLP model). false: the "
        "raw topics hold the text as collected and only the stream stage redacts.",
    )
    rules_path: Path | None = Field(
        default=None, description="Rules file; None: the packaged rules (the stream's default)."
    )
    key_file: Path | None = Field(
        default=None,
        description="Hash key file when the rules' key_env is unset (the workers' key, so hashed "
        "values get the stream's tokens). No key: hashed entities are left to the stream.",
    )


@dataclass
class SourceRedactionStats:
    """Counted, never silent (the agent's stats and the bench read these)."""

    batches: int = 0
    events: int = 0
    audit_rows: int = 0
    stage_failures: int = 0  # the stage raised: the batch was emptied (quarantine_all)
    events_dropped: int = 0  # even emptying failed: the batch was not published
    last_error: str | None = field(default=None)


@lru_cache(maxsize=4)
def _redactor(rules_path: Path | None, key: bytes | None) -> LightRedactor:
    """One light redactor per rules and key in a process (building one compiles every regex)."""
    from rankscope.redaction.light import LightRedactor

    return LightRedactor(load_rules(rules_path), key)


class SourceRedaction:
    """Redacts producer batches; one per producer (agent, exporter), thread-safe."""

    def __init__(
        self, config: SourceRedactionConfig, *, stage: RedactionStageName, origin: str
    ) -> None:
        try:  # phonenumbers, tldextract: the 'agent' extra (no Presidio: redaction/light.py)
            rules = load_rules(config.rules_path)
            key = load_key(rules.settings.key_env, config.key_file, create=False)
            redactor = _redactor(config.rules_path, key)
            from rankscope.redaction.stage import RedactionStage
        except ModuleNotFoundError as exc:
            hint = " (or set redaction.enabled: false; the stream stage redacts)"
            missing = missing_extra(exc, "source redaction", hint)
            if missing is None:
                raise
            raise missing from exc

        self.stage = RedactionStage(rules, key, redactor, stage=stage)
        self.stats = SourceRedactionStats()
        # audit ids are derived from this "record" name: unique per process and batch
        self._record = f"{stage}:{origin}:{uuid.uuid4().hex}"
        self._lock = threading.Lock()

    @property
    def rules_version(self) -> str:
        return self.stage.version

    def apply(self, events: Sequence[Event]) -> tuple[list[Event], list[RedactionAudit]]:
        """The events as they may be published, and the audit rows of what was found."""
        with self._lock:
            self.stats.batches += 1
            self.stats.events += len(events)
            record = f"{self._record}:{self.stats.batches}"
            batch = list(events)
            try:
                result = self.stage.process(batch, record)
            except Exception as exc:  # a bug, never bad input: fail closed for the batch
                self.stats.stage_failures += 1
                self.stats.last_error = f"redaction stage failed: {type(exc).__name__}"
                log.exception("source redaction failed: emptying the batch's free text")
                try:
                    result = self.stage.quarantine_all(batch, record, self.stats.last_error)
                except Exception:
                    self.stats.events_dropped += len(batch)
                    log.exception("could not empty %d event(s): not published", len(batch))
                    return [], []
            self.stats.audit_rows += len(result.audit)
            return result.events, result.audit

    def publishable(
        self, events: Sequence[Event], make: ReportEventFactory, *, agent: str
    ) -> list[Event]:
        """``apply``, with the audit rows as report events (``source_audit``) at the end: what
        the producer publishes on the raw topic."""
        out, audit = self.apply(events)
        if audit:
            out.extend(make(p) for p in report_payloads(audit, agent=agent))
        return out
