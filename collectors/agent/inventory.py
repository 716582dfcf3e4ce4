"""What the node runs: the inventory source protocol and the default, cheap version reader.

Why: the agent emits a ``node_inventory`` event (driver/CUDA/NCCL/kernel/firmware versions) at
start and whenever its fingerprint changes, because config drift between nodes is a straggler
cause. Reading it must never fail on a node that lacks a source.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["DefaultInventorySource", "InventorySource"]


@runtime_checkable
class InventorySource(Protocol):
    """What the node runs: ``NodeInventory`` fields except ``fingerprint`` (missing ones are
    left at their defaults). Called every ``inventory_interval_s``; must be cheap-ish."""

    def read(self) -> Mapping[str, Any]: ...


_DRIVER_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+)+)")
_NCCL_SO_RE = re.compile(r"libnccl\.so\.([0-9]+(?:\.[0-9]+)+)$")
_NCCL_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/local/cuda/lib64",
    "usr/local/lib",
)


class DefaultInventorySource:
    """Reads what it can, cheaply, and never raises for a missing source.

    * kernel: ``/proc/sys/kernel/osrelease`` (``platform.release()`` as fallback);
    * os: ``PRETTY_NAME`` from ``/etc/os-release``;
    * driver, CUDA (driver API) version, GPU model/count/VBIOS: NVML when ``pynvml`` initialises,
      else the driver version from ``/proc/driver/nvidia/version``;
    * NCCL: ``$NCCL_VERSION`` (set by NGC containers) or the newest ``libnccl.so.X.Y.Z`` in the
      usual library directories (a directory listing, no dlopen);
    * HCA firmware: ``/sys/class/infiniband/*/fw_ver``.

    ``root`` relocates every path (tests build a fake tree); ``nvml`` injects an NVML module or
    function table (None: import ``pynvml``; False: do not use NVML).
    """

    def __init__(
        self,
        root: Path | str = "/",
        environ: Mapping[str, str] | None = None,
        nvml: Any = None,
    ) -> None:
        self.root = Path(root)
        self.environ = os.environ if environ is None else environ
        self._nvml = nvml

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def _text(self, rel: str) -> str:
        try:
            return self._path(rel).read_text(errors="replace").strip()
        except OSError:
            return ""

    def read(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "kernel": self._text("proc/sys/kernel/osrelease")
            or (platform.release() if str(self.root) == "/" else ""),
            "os": self._os_name(),
            "extra": {"arch": platform.machine()} if str(self.root) == "/" else {},
        }
        fields.update(self._nvml_fields())
        if not fields.get("driver_version"):
            match = _DRIVER_RE.search(self._text("proc/driver/nvidia/version"))
            if match:
                fields["driver_version"] = match.group(1)
        if not fields.get("cuda_version") and self.environ.get("CUDA_DRIVER_VERSION"):
            fields["cuda_version"] = self.environ["CUDA_DRIVER_VERSION"]
        fields["nccl_version"] = self._nccl_version()
        fields["hca_firmware"] = self._hca_firmware()
        return {k: v for k, v in fields.items() if v not in ("", None, {})}

    def _os_name(self) -> str:
        values: dict[str, str] = {}
        for line in self._text("etc/os-release").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip('"')
        return values.get("PRETTY_NAME") or values.get("NAME", "")

    def _nvml_fields(self) -> dict[str, Any]:
        nvml = self._nvml
        if nvml is False:
            return {}
        if nvml is None:
            try:
                import pynvml

                nvml = pynvml
            except ImportError:
                return {}
        try:
            nvml.nvmlInit()
        except Exception:  # no driver (NVMLError_LibraryNotFound, ...): not a GPU node
            return {}
        out: dict[str, Any] = {}
        try:
            with contextlib.suppress(Exception):
                out["driver_version"] = _str(nvml.nvmlSystemGetDriverVersion())
            with contextlib.suppress(Exception):
                cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
                out["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
            with contextlib.suppress(Exception):
                count = int(nvml.nvmlDeviceGetCount())
                out["gpu_count"] = count
                vbios: dict[str, str] = {}
                for index in range(min(count, 64)):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    if index == 0:
                        with contextlib.suppress(Exception):
                            out["gpu_model"] = _str(nvml.nvmlDeviceGetName(handle))
                    with contextlib.suppress(Exception):
                        vbios[str(index)] = _str(nvml.nvmlDeviceGetVbiosVersion(handle))
                out["gpu_vbios"] = vbios
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
        return out

    def _nccl_version(self) -> str:
        env = self.environ.get("NCCL_VERSION", "").strip()
        if env:
            return env
        best: tuple[int, ...] = ()
        for rel in _NCCL_DIRS:
            directory = self._path(rel)
            try:
                names = [p.name for p in directory.glob("libnccl.so.*")]
            except OSError:
                continue
            for name in names:
                match = _NCCL_SO_RE.search(name)
                if match:
                    version = tuple(int(p) for p in match.group(1).split("."))
                    best = max(best, version)
        return ".".join(str(p) for p in best)

    def _hca_firmware(self) -> dict[str, str]:
        out: dict[str, str] = {}
        base = self._path("sys/class/infiniband")
        try:
            devices = sorted(base.iterdir())
        except OSError:
            return out
        for device in devices[:64]:
            with contextlib.suppress(OSError):
                out[device.name] = (device / "fw_ver").read_text().strip()
        return out


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
