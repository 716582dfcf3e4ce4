"""The watch half of the collector: one thread per resource lists it, then watches it from the
list's version, resumes after a drop, relists on 410 Gone and backs off on errors, reporting a
run of failures as ``collector_error`` / ``collector_recovered``."""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tenacity

from rankscope.collectors.base import Emit
from rankscope.collectors.kubernetes.client import KubeApiError, _Dropped, _Expired, _Stream
from rankscope.collectors.kubernetes.parsing import _dicts, _get, _int_text
from rankscope.collectors.kubernetes.state import _KubernetesCollectorBase, _Resource

log = logging.getLogger("rankscope.collectors.kubernetes")  # one logger for the package, as before


@dataclass
class _Cursor:
    """Where a watch resumes: the last resourceVersion applied (None: list first)."""

    rv: str | None = None


class _Watches(_KubernetesCollectorBase):
    """The collector's lifecycle (``start``/``stop``) and the list/watch loop of each resource."""

    # -- lifecycle ---------------------------------------------------------------------------

    def resources(self) -> list[_Resource]:
        cfg = self.config
        ns = f"/namespaces/{urllib.parse.quote(cfg.namespace)}" if cfg.namespace else ""
        pod_params: dict[str, str] = {}
        if cfg.label_selector:
            pod_params["labelSelector"] = cfg.label_selector
        if cfg.node_name:
            pod_params["fieldSelector"] = f"spec.nodeName={cfg.node_name}"
        out = [_Resource("pods", f"/api/v1{ns}/pods", pod_params)]
        if cfg.watch_nodes:
            node_params = (
                {"fieldSelector": f"metadata.name={cfg.node_name}"} if cfg.node_name else {}
            )
            out.append(_Resource("nodes", "/api/v1/nodes", node_params))
        if cfg.watch_events:
            out.append(_Resource("events", f"/api/v1{ns}/events", {}))
        return out

    def start(self, emit: Emit) -> None:
        """Start one daemon watch thread per resource."""
        if self._threads:
            raise RuntimeError("kubernetes collector already started")
        self._emit = emit
        self._stop.clear()
        for res in self.resources():
            self.stats[res.name] = {
                "lists": 0,
                "watches": 0,
                "relists": 0,
                "drops": 0,
                "errors": 0,
                "failing": 0,
            }
            t = threading.Thread(
                target=self._run, args=(res,), name=f"rankscope-k8s-{res.name}", daemon=True
            )
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        """Signal the threads, cut their open streams, and wait for them (bounded)."""
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            s.abort()
        deadline = time.monotonic() + 5.0
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    # -- the watch loop ----------------------------------------------------------------------

    def _run(self, res: _Resource) -> None:
        backoff = self.config.backoff_initial_s
        cursor = _Cursor()
        while not self._stop.is_set():
            try:
                if cursor.rv is None:
                    cursor.rv = self._relist(res)
                opened = time.monotonic()
                self._watch(res, cursor)
                backoff = self.config.backoff_initial_s
                if time.monotonic() - opened < self.config.backoff_initial_s:
                    self._stop.wait(self.config.backoff_initial_s)  # no hot loop on instant ends
            except _Expired as exc:
                log.info("kubernetes %s: %s; relisting", res.name, exc)
                self.stats[res.name]["relists"] += 1
                cursor.rv = None
            except _Dropped as exc:
                # routine (API server restarts, load balancers): no error event, quick resume
                log.info(
                    "kubernetes %s: watch broke (%s); resuming at %s", res.name, exc, cursor.rv
                )
                self.stats[res.name]["drops"] += 1
                self._stop.wait(self.config.backoff_initial_s)
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._failed(res, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.config.backoff_max_s)

    def _sleep(self, seconds: float) -> None:
        """A wait that stop() cuts short (tests put a fake clock here)."""
        self._stop.wait(seconds)

    def _relist(self, res: _Resource) -> str:
        """List; a list answered 410 Gone again and again is retried with exponential backoff
        and jitter, capped at ``backoff_max_s``: retried at once, a 410 loop sent hundreds of
        requests a second. The first retry is reported as ``collector_error``."""
        cfg = self.config
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Expired),
            wait=tenacity.wait_exponential_jitter(
                multiplier=cfg.backoff_initial_s,
                max=cfg.backoff_max_s,
                jitter=cfg.backoff_initial_s,
            ),
            stop=tenacity.stop_when_event_set(self._stop),
            sleep=self._sleep,
            before_sleep=lambda state: self._list_expired(res, state),
            reraise=True,
        )
        return retrying(self._list, res)

    def _list_expired(self, res: _Resource, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        self.stats[res.name]["relists"] += 1
        self._failed(res, exc if isinstance(exc, Exception) else _Expired("list"), wait)

    def _failed(self, res: _Resource, exc: Exception, backoff: float) -> None:
        """Count a failure; the first of a run of them is reported as collector_error."""
        stats = self.stats[res.name]
        stats["errors"] += 1
        stats["failing"] += 1
        log.warning("kubernetes %s: %s; retry in %.1fs", res.name, exc, backoff)
        if stats["failing"] == 1:
            self._agent_event("collector_error", res, 1, f"{type(exc).__name__}: {exc}")

    def _connected(self, res: _Resource) -> None:
        """A request succeeded: end a run of failures with collector_recovered."""
        stats = self.stats[res.name]
        if stats["failing"]:
            self._agent_event("collector_recovered", res, stats["failing"], "")
            stats["failing"] = 0

    def _register(self, res: _Resource, stream: _Stream | None) -> None:
        """Make the open request abortable by stop() (or forget it)."""
        with self._lock:
            if stream is None:
                self._streams.pop(res.name, None)
            else:
                self._streams[res.name] = stream
        if stream is not None and self._stop.is_set():
            stream.abort()

    def _open(
        self, res: _Resource, params: Mapping[str, str], read_timeout_s: float | None = None
    ) -> _Stream:
        """Open a request that stop() can abort from its first byte on."""
        try:
            return self.client.open(
                res.path, params, read_timeout_s, register=lambda st: self._register(res, st)
            )
        except BaseException:
            self._register(res, None)
            raise

    def _list(self, res: _Resource) -> str:
        """List every page, reconcile with the known state, return the list's version."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            params = dict(res.params, limit=str(self.config.page_limit))
            if cont:
                params["continue"] = cont
            stream = self._open(res, params)
            try:
                doc = stream.read_json(f"list {res.name}")
            finally:
                self._register(res, None)
                stream.abort()
            self._connected(res)
            items.extend(_dicts(doc.get("items")))
            cont = str(_get(doc, "metadata", "continue") or "")
            rv = str(_get(doc, "metadata", "resourceVersion") or "")
            if not cont:
                break
        self.stats[res.name]["lists"] += 1
        self._sync(res, items)
        return rv

    def _watch(self, res: _Resource, cursor: _Cursor) -> None:
        """Stream one watch; ``cursor.rv`` follows every object and bookmark applied, so a
        watch that ends or breaks anywhere resumes exactly after the last one."""
        params = dict(
            res.params,
            watch="1",
            resourceVersion=cursor.rv or "",
            allowWatchBookmarks="true",
            timeoutSeconds=str(self.config.watch_timeout_s),
        )
        stream = self._open(
            res, params, self.config.watch_timeout_s + self.config.request_timeout_s
        )
        self._connected(res)
        self.stats[res.name]["watches"] += 1
        lines = stream.lines()
        try:
            while True:
                try:
                    line = next(lines)
                except StopIteration:
                    break
                except (http.client.HTTPException, OSError) as exc:
                    if self._stop.is_set():
                        break
                    raise _Dropped(f"{type(exc).__name__}: {exc}") from exc
                try:
                    ev = json.loads(line)
                except ValueError as exc:
                    raise KubeApiError(200, f"watch {res.name}: bad line {line[:80]!r}") from exc
                etype = str(ev.get("type", "")) if isinstance(ev, dict) else ""
                obj = ev.get("object") if isinstance(ev, dict) else None
                if not isinstance(obj, dict):
                    raise KubeApiError(200, f"watch {res.name}: event without object")
                if etype == "ERROR":
                    code = _int_text(obj.get("code")) or 0
                    message = str(obj.get("message", ""))
                    if code == 410:
                        raise _Expired(message)
                    raise KubeApiError(code, message, str(obj.get("reason", "")))
                new_rv = _get(obj, "metadata", "resourceVersion")
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    self._handle(res, etype, obj)
                if new_rv:
                    cursor.rv = str(new_rv)
        finally:
            self._register(res, None)
            stream.abort()
