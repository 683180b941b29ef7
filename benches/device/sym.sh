#!/usr/bin/env bash
# Issue 24: (1) `--device auto` started right after a GPU job claims the GPU (it waits for the
# job's activity to leave the SMI window) instead of falling back to the CPU; (2) the reference
# evaluated as its own candidate under each timing method, on problems where it read off 1.0x.
# Run from the repository root through `device`, carrying $KG_DEVICE_DIR/bin.
source "$(dirname "$0")/common.sh"
K=$B/bin
python3 - <<'PY' > $R/busy.txt 2>&1
import time, torch
a = torch.randn(8192, 8192, device="cuda")
t = time.time()
while time.time() - t < 4:
    a @ a
torch.cuda.synchronize()
print("busy job done")
PY
timeit auto 120 $K/kg-bench evaluate problems/core/rmsnorm_bf16_qwen2_5_0_5b --solution reference --max-workloads 1 --json
for p in attention_decode_bf16_qwen2_5_0_5b rmsnorm_bf16_qwen2_5_0_5b gemm_bf16_qwen2_5_0_5b_down_proj fp8_dequant_block128_deepseek_v3; do
  for t in default events cuda-graph; do
    timeit "sym_${p%%_*}_$t" 200 $K/kg-bench evaluate problems/core/$p --solution reference --timing $t --json
  done
  pack
done
python3 - "$R" <<'PY' | tee -a $R/walls.txt
import json, sys, glob, os, statistics
r = sys.argv[1]
for f in sorted(glob.glob(f"{r}/sym_*.out")):
    try:
        rows = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "no json", e); continue
    rows = rows if isinstance(rows, list) else rows.get("traces", [])
    sp = [t["evaluation"]["performance"]["speedup_factor"] for t in rows if (t.get("evaluation") or {}).get("performance")]
    m = [t["evaluation"]["performance"].get("timing_method") for t in rows if (t.get("evaluation") or {}).get("performance")]
    print(os.path.basename(f)[:-4], "n", len(sp), "speedups", [round(x, 3) for x in sp], "median", round(statistics.median(sp), 3) if sp else None, "methods", sorted(set(map(str, m))))
PY
pack
