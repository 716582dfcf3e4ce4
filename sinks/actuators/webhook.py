"""The webhook actuator: a signed HTTP POST per decision (to a pager, a chat bot, a runbook).

It POSTs the decision as JSON, signed with HMAC-SHA256 over the exact body
(``X-Rankscope-Signature: sha256=<hex>``, the scheme GitHub and Stripe use) and carrying the
idempotency key (``X-Rankscope-Key``) so the receiver can drop a duplicate too. Connection
errors, timeouts and 5xx answers are retried with exponential backoff; a 4xx is final.

A webhook URL is often a secret itself (a chat bot's token in the path, credentials in the
host part), so it never appears in an outcome, a log line or an error (issue 14): only
``redact_url``'s form, the scheme and host with the rest replaced by a short fingerprint.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
import urllib.error
import urllib.parse
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


def redact_url(url: str) -> str:
    """``scheme://host[:port]/...#<fingerprint>``: which endpoint, never its path, query or
    credentials. The fingerprint (12 hex of a SHA-256 of the whole URL) tells two URLs apart;
    webhook paths carry long random tokens, so it does not help to guess one."""
    digest = hashlib.sha256(b"rankscope-webhook-url\n" + url.encode()).hexdigest()[:12]
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
        scheme = parts.scheme if parts.scheme in ("http", "https") else "?"
    except ValueError:
        scheme, host, port = "?", "?", ""
    return f"{scheme}://{host}{port}/...#{digest}"


def _why(exc: BaseException) -> str:
    """What went wrong, without any text an error may have copied from the URL: the error's
    type and, for an OS error, its fixed message (``Connection refused``)."""
    reason = getattr(exc, "reason", exc)
    text = reason.strerror if isinstance(reason, OSError) and reason.strerror else ""
    if isinstance(reason, TimeoutError) and not text:
        text = "timed out"
    return f"{type(reason).__name__}: {text}" if text else type(reason).__name__


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class WebhookActuator:
    name = "webhook"

    def __init__(self, config: WebhookConfig, secret: bytes | None = None) -> None:
        self.config = config
        value = secret if secret is not None else os.environ.get(config.secret_env, "").encode()
        if not value:
            raise ValueError(f"webhook actuator: set {config.secret_env} (the HMAC key)")
        if urllib.parse.urlsplit(config.url).scheme not in ("http", "https"):
            raise ValueError("webhook actuator: the URL must be http:// or https://")
        self._secret = value
        self.endpoint = redact_url(config.url)

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        body = decision.model_dump_json().encode()
        headers = {
            "Content-Type": "application/json",
            "X-Rankscope-Key": decision.key,
            "X-Rankscope-Signature": sign(self._secret, body),
        }
        cfg = self.config
        where = self.endpoint
        last = ""
        for attempt in range(cfg.retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(cfg.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                    return ActuatorResult(True, f"POST {where}: {response.status}")
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code < 500:
                    return ActuatorResult(False, f"POST {where}: {last}, not retried")
            except Exception as exc:  # URLError, timeouts, and anything that may quote the URL
                last = _why(exc)
        tries = cfg.retries + 1
        return ActuatorResult(False, f"POST {where}: {last} after {tries} attempt(s)")
