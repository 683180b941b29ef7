#!/usr/bin/env bash
# Device call (issue 24): SOL-ExecBench's 7 Hopper examples side by side with its own CLI,
# kg-bench with a cold build cache and `--gpus all`.
. "$(dirname "$0")/common.sh"
export KG_CACHE_DIR=/tmp/kgcache-sbs2-$$
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 560 bash benches/side_by_side/run.sh $B/solx $B/sol $R/sbs > $R/sbs.txt 2>&1; echo "side-by-side rc=$?" | tee -a $R/sbs.txt; cat $R/sbs.txt; cat $R/sbs/walls.tsv
tail -3 $R/sbs/sol-1-triton_rmsnorm.log
pack
