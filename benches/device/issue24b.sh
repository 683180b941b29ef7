#!/usr/bin/env bash
# Second device call (issue 24): the agent-loop population (50 Triton candidates with
# kg-bench against SOL-ExecBench's CLI once per candidate for the first 10), then every
# problems/core workload with the reference as its own candidate (item 6: 1.00 within 3 %).
. "$(dirname "$0")/common.sh"
export KG_CACHE_DIR=/tmp/kgcache-b
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 300 bash benches/population/run.sh $B/solx $R/pop 50 10 > $R/pop.txt 2>&1; log "population rc=$?"; cat $R/pop.txt
rm -rf $R/pop/pop
pack
timeit core-self 240 $B/bin/kg-bench run problems/core --solutions reference -q -o $R/core-self --gpus all
SUMMARY=$R/summary-b.json python3 benches/device/summarize.py $R/core-self 2>&1 | grep -v timeline | tee $R/summary-b.txt
python3 - $R/summary-b.json <<'PY' | tee -a $R/summary-b.txt
import json, sys
d = json.load(open(sys.argv[1]))
for k, v in d.items():
    sp = [(r["definition"], r["workload"][:8], r["speedup"]) for r in v["rows"] if r["speedup"]]
    bad = [s for s in sp if abs(s[2] - 1) > 0.03]
    print(f"self-speedup: {len(sp)} workloads, {len(bad)} outside 1.00 +- 3 %; min {min(s[2] for s in sp):.3f} max {max(s[2] for s in sp):.3f}")
    for s in sorted(bad, key=lambda s: s[2]):
        print("  ", *s)
PY
cat $R/walls.txt
pack
