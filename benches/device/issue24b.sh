#!/usr/bin/env bash
# Second device call (issue 24): the agent-loop population (50 Triton candidates with
# kg-bench against SOL-ExecBench's CLI once per candidate for the first 10), then every
# problems/core workload with the reference as its own candidate (item 6: 1.00 within 3 %).
set -u
B=${KG_DEVICE_DIR:-.device-bin/s34}; R=$OUT/r; mkdir -p $R
export PYTHON_BIN=python3
log() { echo "$@" | tee -a $R/walls.txt; }
timeit() { local name=$1 lim=$2; shift 2; local t0=$(date +%s.%N); timeout $lim "$@" > $R/$name.out 2> $R/$name.err; local rc=$?; local t1=$(date +%s.%N); log "$name rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))")"; }
pack() { (cd $OUT && tar czf r.tgz r); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $B/whl/*.whl > $R/pip.txt 2>&1; log "pip rc=$?"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm --format=csv,noheader | tee $R/smi.txt
export KG_CACHE_DIR=/tmp/kgcache-b
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 300 bash benches/population/run.sh $B/solx $R/pop 50 10 > $R/pop.txt 2>&1; log "population rc=$?"; cat $R/pop.txt
rm -rf $R/pop/pop
pack
timeit core-self 240 $B/bin/kg-bench run problems/core --solutions reference -q -o $R/core-self --gpus all
SUMMARY=$R/summary-b.json python3 benches/device/summarize.py $R/core-self 2>&1 | tee $R/summary-b.txt
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
