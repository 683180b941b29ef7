#!/usr/bin/env bash
# Second device call (issue 24, on the H200): the population and the reference as its own
# candidate (issue24b.sh), then the same with `--timing cuda-graph`, and `problems/core`'s
# bundled solutions, each timed as a whole process.
here=$(dirname "$0")
bash "$here/issue24b.sh"
. "$here/common.sh" > /dev/null
timeit core-self-graph 120 $B/bin/kg-bench run problems/core --solutions reference -q -o $R/core-self-graph --gpus all --timing cuda-graph
timeit core-bundled 150 $B/bin/kg-bench run problems/core --solutions bundled -q -o $R/core-bundled --gpus all
SUMMARY=$R/summary-c.json python3 $here/summarize.py $R/core-self-graph $R/core-bundled 2>&1 | grep -v timeline | tee $R/summary-c.txt
python3 - $R/summary-c.json <<'PY' | tee -a $R/summary-c.txt
import json, sys
d = json.load(open(sys.argv[1]))
for k, v in d.items():
    sp = [r["speedup"] for r in v["rows"] if r["speedup"]]
    bad = [s for s in sp if abs(s - 1) > 0.03]
    print(f"{k}: {len(sp)} speedups, {len(bad)} outside 1.00 +- 3 %")
PY
cat $R/walls.txt
pack
