"""The webhook actuator: a signed HTTP POST per decision (to a pager, a chat bot, a runbook).

It POSTs the decision as JSON, signed with HMAC-SHA256 over the exact body
(``X-Rankscope-Signature: sha256=<hex>``, the scheme GitHub and Stripe use) and carrying the
idempotency key (``X-Rankscope-Key``) so the receiver can drop a duplicate too. Connection
errors, timeouts and 5xx answers are retried with exponential backoff; a 4xx is final.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
import urllib.error
import urllib.request

from pydantic import BaseModel, Field

from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.base import ActuatorResult

log = logging.getLogger("rankscope.recovery")


class WebhookConfig(BaseModel):
    url: str
    secret_env: str = Field(
        default="RANKSCOPE_WEBHOOK_SECRET", description="Environment variable with the HMAC key."
    )
    timeout_s: float = Field(default=5.0, gt=0)
    retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0, description="First retry wait; doubles after.")


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class WebhookActuator:
    name = "webhook"

    def __init__(self, config: WebhookConfig, secret: bytes | None = None) -> None:
        self.config = config
        value = secret if secret is not None else os.environ.get(config.secret_env, "").encode()
        if not value:
            raise ValueError(f"webhook actuator: set {config.secret_env} (the HMAC key)")
        self._secret = value

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        body = decision.model_dump_json().encode()
        headers = {
            "Content-Type": "application/json",
            "X-Rankscope-Key": decision.key,
            "X-Rankscope-Signature": sign(self._secret, body),
        }
        cfg = self.config
        last = ""
        for attempt in range(cfg.retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(cfg.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                    return ActuatorResult(True, f"POST {cfg.url}: {response.status}")
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code < 500:
                    return ActuatorResult(False, f"POST {cfg.url}: {last}, not retried")
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
        tries = cfg.retries + 1
        return ActuatorResult(False, f"POST {cfg.url}: {last} after {tries} attempt(s)")
