#!/usr/bin/env bash
# Device call (issue 24): lanes (--gpus all against --device auto) on the problems/core
# references; SOL-ExecBench's 7 Hopper examples side by side with its own harness (kg-bench
# cold build cache), then kg-bench warm; then the build of 90afbe1 (candidates build their
# own modules) as far as time allows.
. "$(dirname "$0")/common.sh"
python3 -m pip show nvidia-cuda-cupti 2>/dev/null | grep -i version | tee -a $R/smi.txt
PYTHONPATH=/tmp/site python3 -c "from cupti import cupti; print('cupti-python ok')" >> $R/smi.txt 2>&1; tail -1 $R/smi.txt
$B/bin/kg-gpu list > $R/gpu-list.txt 2>&1; log "kg-gpu list rc=$?"
timeit core-gpus 90 $B/bin/kg-bench run problems/core --solutions reference --max-workloads 1 -q -o $R/core-gpus --gpus all
pack
export KG_CACHE_DIR=/tmp/kgcache-new
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 330 bash benches/side_by_side/run.sh $B/solx $B/sol $R/sbs > $R/sbs.txt 2>&1; log "side-by-side rc=$?"; cat $R/sbs.txt
pack
timeit sol-warm 90 $B/bin/kg-bench run $B/sol --solutions bundled --gpus all -q --rerun -o $R/sol-warm --compile-timeout 300
$B/bin/kg-bench cache ls > $R/cache-ls.txt 2>&1
pack
timeit core-auto 90 $B/bin/kg-bench run problems/core --solutions reference --max-workloads 1 -q -o $R/core-auto --device auto
SUMMARY=$R/summary.json python3 benches/device/summarize.py $R/core-auto $R/core-gpus $R/sbs/kg-1 $R/sol-warm 2>&1 | tee $R/summary.txt
pack
export KG_CACHE_DIR=/tmp/kgcache-old
timeit sol-old 100 $B/old/kg-bench run $B/sol --solutions bundled --device auto -q -o $R/sol-old --compile-timeout 300
SUMMARY=$R/summary2.json python3 benches/device/summarize.py $R/sol-old 2>&1 | tee -a $R/summary.txt
cat $R/walls.txt
pack
