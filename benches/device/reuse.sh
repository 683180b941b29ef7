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
  pop_run reuse-$r 220 --reference-reuse $age
  runs+=($R/reuse-$r)
  pack
done
python3 "$here/reuse_summary.py" "${runs[@]}" | tee $R/summary.txt
if want sol && [ -d $B/solx ]; then
  pop_vs_sol --reference-reuse 60
fi
rm -rf $R/popsol
cat $R/walls.txt
pack
