#!/usr/bin/env bash
# Device call (issue 24 and correctness): DPS outputs filled with NaN before each correctness
# round, ~5 min. 1. `problems/core` bundled (every status must stay PASSED); 2. the tail-mask
# mutants (fixtures/mutants: each INCORRECT_NUMERICAL somewhere); 3. the `add` fixture whose
# DPS solution never writes its last 4 elements (INCORRECT_NUMERICAL on both workloads);
# 4. the population against SOL-ExecBench's CLI with `--reference-reuse 60` (where
# $KG_DEVICE_DIR/solx holds its src/), or (part `pop`) the population alone with it. KG_PARTS
# picks parts (default "bundled mutants add sol").
here=$(dirname "$0")
. "$here/common.sh"
parts=" ${KG_PARTS:-bundled mutants add sol} "
want() { [[ $parts == *" $1 "* ]]; }
st() { python3 -c "
import collections, glob, json, sys
c = collections.Counter(json.loads(l)['evaluation']['status'] for f in glob.glob(sys.argv[1] + '/*/*.jsonl') for l in open(f))
print(sys.argv[1].rsplit('/', 1)[-1], dict(c))" "$1" | tee -a $R/walls.txt; }
if want bundled; then
  export KG_CACHE_DIR=/tmp/kgc-bundled
  timeit core-bundled 150 $B/bin/kg-bench run problems/core --solutions bundled -q -o $R/core-bundled --gpus all
  st $R/core-bundled; pack
fi
if want mutants; then
  export KG_CACHE_DIR=/tmp/kgc-mutants
  timeit mutants 150 $B/bin/kg-bench run problems/core --solutions fixtures/mutants -q -o $R/mutants --gpus all
  st $R/mutants; pack
fi
if want add; then
  F=crates/exec/tests/fixtures/corpus/add
  timeit add 60 $B/bin/kg-bench evaluate $F --solution $F/solutions/tail_unwritten_dps.json -o $R/add.jsonl --json
  python3 -c "
import json
for l in open('$R/add.jsonl'):
    e = json.loads(l)['evaluation']; print('add tail_unwritten_dps', e['status'], e.get('reason'), [x for x in e['log'].splitlines() if 'NaN' in x][:1])" | tee -a $R/walls.txt
  pack
fi
if want pop; then
  # The population alone, as `reuse.sh` runs it with reuse on (no peer beside it).
  python3 benches/population/make.py $R/popsol 50 > /dev/null
  export KG_CACHE_DIR=/tmp/kgc-pop
  pop_run pop 200 --reference-reuse 60
  st $R/pop; rm -rf $R/popsol; pack
fi
if want sol && [ -d $B/solx ]; then
  pop_vs_sol --reference-reuse 60; st $R/pop-sol/kg
fi
cat $R/walls.txt
pack
