#!/usr/bin/env bash
# The device check, one prepared script for a machine with an NVIDIA GPU (run as root from the
# repository root; results under $OUT, or ./device-out when OUT is unset):
#   1. facts: driver, GPU, who we are, which kernel-log sources exist;
#   2. the kernel log as it is (NVRM / Xid / AER lines already there);
#   3. bench/device/nvml_probe.py polling NVML with its XID event thread, and (when present)
#      bench/device/kernel_log_probe.py following the kernel log, both running while
#   4. bench/device/xid_fault.py makes the driver log one real XID 31 (an application's illegal
#      memory access: the faulting process's context dies, the GPU is not reset);
#   5. the kernel log's new NVRM lines after the fault.
# Python packages the machine lacks travel as wheels in .whl/ (see bench/device/README.md).
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
{
  echo "## date"; date -u
  echo "## id"; id
  echo "## uname"; uname -a
  echo "## nvidia-smi"; nvidia-smi --query-gpu=name,pci.bus_id,uuid,driver_version,vbios_version,persistence_mode --format=csv 2>&1
  echo "## /dev/kmsg"; ls -la /dev/kmsg 2>&1
  echo "## journalctl"; command -v journalctl 2>&1 || echo "no journalctl"
  echo "## /var/log"; ls /var/log 2>&1 | head -30
  echo "## /proc/sys/kernel/dmesg_restrict"; cat /proc/sys/kernel/dmesg_restrict 2>&1
  echo "## boot_id"; cat /proc/sys/kernel/random/boot_id 2>&1
} > "$OUT/facts.txt" 2>&1

kmsg_lines() {  # every record /dev/kmsg still holds, one per line, with the matching ones kept
  python3 - "$1" <<'PY'
import errno, os, re, sys, json
keep = re.compile(r"NVRM|Xid|SXid|nvidia|AER|pcieport|GSP", re.I)
out = {"records": 0, "lost": 0, "matched": [], "error": None}
try:
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
except OSError as e:
    out["error"] = f"open: {e}"
else:
    while True:
        try:
            rec = os.read(fd, 8192)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                break
            if e.errno == errno.EPIPE:
                out["lost"] += 1
                continue
            out["error"] = f"read: {e}"
            break
        out["records"] += 1
        text = rec.decode("utf-8", "replace").rstrip("\n")
        if keep.search(text):
            out["matched"].append(text)
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(f"kmsg: {out['records']} records, {len(out['matched'])} matched, lost {out['lost']}, error {out['error']}")
PY
}
kmsg_lines "$OUT/kmsg_before.json"

KL=""
if [ -f bench/device/kernel_log_probe.py ]; then
  timeout 90 python3 bench/device/kernel_log_probe.py --seconds 2 --steady-seconds 25 \
    --json "$OUT/kernel_log_probe.json" \
    > "$OUT/kernel_log_probe.stdout" 2>&1 &
  KL=$!
fi
timeout 90 python3 bench/device/nvml_probe.py --cycles 20 --interval 1.0 --json "$OUT/nvml_probe.json" \
  > "$OUT/nvml_probe.stdout" 2>&1 &
NV=$!
sleep 6
timeout 60 python3 bench/device/xid_fault.py > "$OUT/xid_fault.json" 2>&1
echo "xid_fault: $(cat "$OUT/xid_fault.json" | tail -1)"
wait $NV; echo "nvml_probe exit $?"
[ -n "$KL" ] && { wait $KL; echo "kernel_log_probe exit $?"; }
kmsg_lines "$OUT/kmsg_after.json"
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
try:
    n = json.load(open(f"{o}/nvml_probe.json"))
    print("nvml:", n.get("driver_version"), "gpus", len(n.get("gpus", [])), "events", len(n.get("events", [])),
          "poll cpu ms mean", n.get("poll_cpu_ms_mean_after_first"))
    for e in n.get("events", []):
        print("  nvml event:", e)
except Exception as e:
    print("nvml_probe.json:", e)
try:
    k = json.load(open(f"{o}/kernel_log_probe.json"))
    st = k.get("steady", {})
    print("kernel_log:", k.get("working_sources"), "auto", k.get("auto_source"),
          "pct of a core", st.get("pct_of_one_core_at_1s (after first)"))
    for e in st.get("events_brief", []):
        print("  kernel_log live event:", e)
except Exception as e:
    print("kernel_log_probe.json:", e)
a = json.load(open(f"{o}/kmsg_after.json"))
for line in a["matched"][-20:]:
    print("  kmsg:", line[:300])
PY
