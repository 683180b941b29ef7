#!/usr/bin/env bash
# Device call (issue 24, on the H200): SOL-ExecBench's 7 Hopper examples side by side with its
# own CLI (kg-bench with a cold build cache, `--gpus all`), kg-bench again warm, the build in
# $KG_DEVICE_DIR/old (if any) alone with a cold cache, then where a cold `cuda_cpp` build's
# time goes (nvcc_phases.py on flux_rope).
. "$(dirname "$0")/common.sh"
export KG_CACHE_DIR=/tmp/kgcache-a-$$
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 360 bash benches/side_by_side/run.sh $B/solx $B/sol $R/sbs > $R/sbs.txt 2>&1; log "side-by-side rc=$?"; cat $R/sbs.txt; cat $R/sbs/walls.tsv
pack
timeit sol-warm 90 $B/bin/kg-bench run $B/sol --solutions bundled --gpus all -q --rerun -o $R/sol-warm --compile-timeout 300
if [ -x $B/old/kg-bench ]; then
  KG_CACHE_DIR=/tmp/kgcache-old-$$ timeit sol-old-cold 150 $B/old/kg-bench run $B/sol --solutions bundled --gpus all -q --rerun -o $R/sol-old-cold --compile-timeout 300
fi
SUMMARY=$R/summary-a.json python3 benches/device/summarize.py $R/sbs/kg-1 $R/sol-warm $([ -d $R/sol-old-cold ] && echo $R/sol-old-cold) 2>&1 | tee $R/summary-a.txt
pack
timeout 60 python3 benches/device/triton_first_call.py $R/tfc 2>&1 | tee $R/tfc.txt
timeout 170 python3 benches/device/nvcc_phases.py $B/sol/cuda_cpp/flux_rope $R/nvcc 2>&1 | tee $R/nvcc.txt
cat $R/walls.txt
pack
