#!/usr/bin/env bash
# Device call (issue 24): the agent-loop population alone (50 Triton candidates through
# kg-bench, SOL-ExecBench's CLI once per candidate for the first 10).
. "$(dirname "$0")/common.sh"
export KG_CACHE_DIR=/tmp/kgcache-pop-$$
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 420 bash benches/population/run.sh $B/solx $R/pop 50 10 > $R/pop.txt 2>&1; echo "population rc=$?" >> $R/pop.txt; cat $R/pop.txt; cat $R/pop/walls.txt
rm -rf $R/pop/pop
pack
