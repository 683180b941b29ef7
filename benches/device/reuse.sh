#!/usr/bin/env bash
# Device call (issue 24): reference timings reused across a population (`--reference-reuse`),
# ~8 min. The 50-candidate population (benches/population/make.py) with `--reference-reuse off`,
# then 60 s, each with a fresh KG_CACHE_DIR; then, where $KG_DEVICE_DIR/solx holds
# SOL-ExecBench's src/, the population against its CLI with reuse on (benches/population/run.sh).
# KG_PARTS picks parts (default "off on sol"). Results in $OUT/r.tgz; reuse_summary.py prints
# statuses, reuse counts, seconds per candidate and reference latencies on against off.
here=$(dirname "$0")
. "$here/common.sh"
parts=" ${KG_PARTS:-off on sol} "
want() { [[ $parts == *" $1 "* ]]; }
python3 benches/population/make.py $R/popsol 50 > /dev/null
runs=()
for r in off on; do
  want $r || continue
  age=$([ $r = on ] && echo 60 || echo off)
  export KG_CACHE_DIR=/tmp/kgc-reuse-$r
  timeit reuse-$r 220 $B/bin/kg-bench run problems/core --solutions $R/popsol --filter problem:gelu_tanh_bf16_gemma2_2b --rerun -q -o $R/reuse-$r --gpus all --reference-reuse $age
  runs+=($R/reuse-$r)
  pack
done
python3 "$here/reuse_summary.py" "${runs[@]}" | tee $R/summary.txt
if want sol && [ -d $B/solx ]; then
  export KG_CACHE_DIR=/tmp/kgc-sbs
  PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all --reference-reuse 60" timeout 300 bash benches/population/run.sh $B/solx $R/pop-sol 50 10 > $R/pop-sol.txt 2>&1
  cat $R/pop-sol.txt; rm -rf $R/pop-sol/pop
fi
rm -rf $R/popsol
cat $R/walls.txt
pack
