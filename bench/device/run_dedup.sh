#!/usr/bin/env bash
# The XID dedup check on a machine with an NVIDIA GPU (run as root from the repository root;
# results under $OUT): bench/device/xid_dedup_probe.py runs the agent with NVML's event thread
# and the kernel-log reader while bench/device/xid_fault.py makes the driver log one real XID 31.
# Python packages the machine lacks travel as wheels in .whl/ (see bench/device/README.md).
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv > "$OUT/facts.txt" 2>&1
timeout 120 python3 bench/device/xid_dedup_probe.py --json "$OUT/xid_dedup_probe.json" \
  > "$OUT/xid_dedup_probe.stdout" 2>&1
echo "xid_dedup_probe exit $?"
tail -c 3000 "$OUT/xid_dedup_probe.stdout"
