#!/usr/bin/env bash
# Issue 24 item 6 and the compare finding of docs/evidence/reports: the reference runs of
# problems/core twice with the SM clock locked (kg-gpu restores it), each workload's
# reference-as-candidate speedup, and `kg-bench compare` of the two runs.
# Run from the repository root through `device`, carrying $KG_DEVICE_DIR/bin.
source "$(dirname "$0")/common.sh"
K=$B/bin
timeit lock1 200 $K/kg-bench run problems/core --gpus all --lock-clocks -q -o $R/lock1
pack
timeit lock2 200 $K/kg-bench run problems/core --gpus all --lock-clocks -q -o $R/lock2
timeit compare 60 $K/kg-bench compare $R/lock1 $R/lock2 --markdown
nvidia-smi --query-gpu=clocks.sm,clocks.applications.graphics --format=csv,noheader >> $R/walls.txt
python3 - "$R" <<'PY' | tee -a $R/walls.txt
import json, glob, statistics, sys
r = sys.argv[1]
for run in ["lock1", "lock2"]:
    v = []; locked = set()
    for f in glob.glob(f"{r}/{run}/*/reference.jsonl"):
        for l in open(f):
            t = json.loads(l); e = t.get("evaluation") or {}; p = e.get("performance")
            c = (e.get("environment") or {}).get("gpu_claim") or {}
            locked.add(str((c.get("clocks") or {}).get("locked")))
            if p: v.append(p["speedup_factor"])
    if v:
        print(f"{run}: n={len(v)} median={statistics.median(v):.4f} outside3%={sum(abs(x-1)>0.03 for x in v)} clocks locked={sorted(locked)}")
PY
head -3 $R/compare.out | tee -a $R/walls.txt
pack
