"""Make the GPU driver log one real XID (an application's illegal memory access) on purpose.

    python bench/device/xid_fault.py

A kernel writes through a null-page pointer; the GPU's MMU faults, the driver logs
``NVRM: Xid (PCI:...): 31, pid=..., name=..., ... MMU Fault ...`` (an application fault, XID 31 in
NVIDIA's catalogue) and the CUDA context of this process dies with "an illegal memory access".
Nothing else is touched: no reset, no settings changed; the GPU stays usable for other processes.
The device check runs it while the kernel-log and NVML probes listen, to see a real XID arrive
through both paths. Prints one JSON line: what CUDA reported and when (epoch ns).
"""

from __future__ import annotations

import json
import time


def main() -> int:
    import cupy as cp

    kernel = cp.RawKernel(
        r"""
extern "C" __global__ void fault(int* unused) {
    volatile int* bad = (volatile int*)0x10;  // null page: never mapped on the GPU
    *bad = 1;
}
""",
        "fault",
    )
    started = time.time_ns()
    error = ""
    try:
        kernel((1,), (1,), (cp.zeros(1, dtype=cp.int32),))
        cp.cuda.runtime.deviceSynchronize()
    except Exception as e:  # the point is to see what CUDA says
        error = f"{type(e).__name__}: {e}"
    print(json.dumps({"launched_ns": started, "returned_ns": time.time_ns(), "cuda_error": error}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
