"""Open a local HTML file in headless Chromium and report what a person's browser would show.

Talks the DevTools protocol over ``--remote-debugging-pipe`` (null-terminated JSON on the
child's fds 3 and 4, the transport Playwright and Puppeteer use to launch Chromium), so it
needs only the standard library and Debian's ``chromium`` package. It records every console
message, uncaught exception and browser log entry, every request the page makes, and fails
each request that is not ``file:`` or ``data:`` before it leaves the machine.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

LOCAL_SCHEMES = ("file:", "data:", "about:")

#: what the page is asked after load: the layout the test checks (in CSS pixels, page coordinates)
_PROBE = """(() => {
  const box = el => { const r = el.getBoundingClientRect();
    return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; };
  const sections = {};
  for (const el of document.querySelectorAll('[data-section]')) {
    (sections[el.dataset.section] ??= []).push({...box(el), text: el.innerText.trim().length});
  }
  return {
    title: document.title,
    sections,
    timelines: [...document.querySelectorAll('[data-section=timeline] svg')].map(box),
    page: {width: document.documentElement.scrollWidth,
           height: document.documentElement.scrollHeight},
  };
})()"""


def find_chromium() -> str | None:
    """``$CHROMIUM``, else Debian's ``chromium`` (or ``chromium-browser``) on PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageLoad:
    """What one page load showed: the screenshot, the layout and everything that went wrong."""

    png: bytes
    layout: dict[str, Any]
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


class CdpError(RuntimeError):
    pass


class _Pipe:
    """One DevTools session over the pipe: commands with ids, events in arrival order."""

    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc = proc
        self._out = to_browser
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next = 0
        threading.Thread(target=self._read, args=(from_browser,), daemon=True).start()

    def _read(self, fd: int) -> None:
        buf = b""
        with os.fdopen(fd, "rb", buffering=0) as f:
            while chunk := f.read(1 << 16):
                buf += chunk
                *messages, buf = buf.split(b"\0")
                for m in messages:
                    self._inbox.put(json.loads(m))
        self._inbox.put(None)  # the browser went away

    def send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> int:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        return self._next

    def next_message(self, deadline: float) -> dict[str, Any]:
        try:
            msg = self._inbox.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise CdpError("no answer from chromium before the deadline") from None
        if msg is None:
            raise CdpError(f"chromium exited (code {self.proc.poll()})")
        return msg


class _Session:
    """A page target: answers commands and keeps the events the test cares about."""

    def __init__(self, pipe: _Pipe, deadline: float) -> None:
        self.pipe = pipe
        self.deadline = deadline
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.blocked: list[str] = []
        self.loaded = False
        self.session = ""

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        want = self.pipe.send(method, params, self.session)
        while True:
            msg = self.pipe.next_message(self.deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise CdpError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self._event(msg)

    def wait_for_load(self) -> None:
        while not self.loaded:
            self._event(self.pipe.next_message(self.deadline))

    def _event(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Page.loadEventFired":
            self.loaded = True
        elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            self.errors.append(f"console.{p['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append(f"uncaught: {d.get('exception', {}).get('description', d['text'])}")
        elif method == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            self.errors.append(f"log.{p['entry']['source']}: {p['entry']['text']}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        elif method == "Fetch.requestPaused":
            url = p["request"]["url"]
            if url.startswith(LOCAL_SCHEMES):
                self.pipe.send("Fetch.continueRequest", {"requestId": p["requestId"]}, self.session)
            else:
                self.blocked.append(url)
                self.pipe.send(
                    "Fetch.failRequest",
                    {"requestId": p["requestId"], "errorReason": "BlockedByClient"},
                    self.session,
                )


def load_page(
    chromium: str, page: Path, *, width: int = 1280, height: int = 900, timeout_s: float = 60.0
) -> PageLoad:
    """Load ``page`` (a local file) in a fresh headless profile; screenshot the whole page."""
    to_r, to_w = os.pipe()  # we write commands, chromium reads them on its fd 3
    from_r, from_w = os.pipe()  # chromium writes answers on its fd 4

    def wire_fds() -> None:
        os.dup2(to_r, 3)
        os.dup2(from_w, 4)

    profile = tempfile.mkdtemp(prefix="rankscope-chromium-")
    try:
        args = [
            chromium,
            "--headless",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # a second fence: no name resolves
            f"--window-size={width},{height}",
            "about:blank",
        ]
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds,  # noqa: PLW1509 (the fds must be exactly 3 and 4)
            pass_fds=(3, 4),  # kept open by the close_fds pass that runs after wire_fds
            start_new_session=True,  # its helper processes share one group, ended with it
        )
        os.close(to_r)
        os.close(from_w)
        pipe = _Pipe(proc, to_w, from_r)
        try:
            return _drive(pipe, page, width, height, time.monotonic() + timeout_s)
        finally:
            os.close(to_w)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            # helpers outlive the browser process and still write to the profile (a clean
            # clone's run once failed removing it: "Directory not empty: 'Default'")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    finally:
        _remove(profile)


def _remove(directory: str) -> None:
    """Remove ``directory``; a helper killed a moment ago may still be finishing a write."""
    for attempt in Retrying(
        retry=retry_if_exception_type(OSError), stop=stop_after_attempt(10), wait=wait_fixed(0.1),
        reraise=True,
    ):  # fmt: skip
        with attempt:
            shutil.rmtree(directory)


def _drive(pipe: _Pipe, page: Path, width: int, height: int, deadline: float) -> PageLoad:
    s = _Session(pipe, deadline)
    target = s.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    s.session = s.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        s.call(f"{domain}.enable")
    s.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})
    s.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    nav = s.call("Page.navigate", {"url": page.resolve().as_uri()})
    if nav.get("errorText"):
        raise CdpError(f"navigation failed: {nav['errorText']}")
    s.wait_for_load()
    probe = s.call("Runtime.evaluate", {"expression": _PROBE, "returnByValue": True})
    if "exceptionDetails" in probe:
        raise CdpError(f"layout probe failed: {probe['exceptionDetails']}")
    layout = dict(probe["result"]["value"])
    full = layout["page"]
    shot = s.call(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": full["width"], "height": full["height"], "scale": 1},
        },
    )
    return PageLoad(base64.b64decode(shot["data"]), layout, s.errors, s.requests, s.blocked)
