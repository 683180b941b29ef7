#!/usr/bin/env bash
# The agent-loop case: a population of N Triton candidates of one problem (make.py), evaluated
# by one `kg-bench run --solutions DIR`, against SOL-ExecBench's CLI once per candidate for the
# first M of them, in one run. Prints seconds per candidate for each and compares statuses.
#
#   benches/population/run.sh SOL_CHECKOUT OUT_DIR [N] [M]
# Environment: KG_BENCH (default target/release/kg-bench), PYTHON (python3), KG_FLAGS.
set -uo pipefail
sol=${1:?usage: run.sh SOL_CHECKOUT OUT_DIR [N] [M]}
out=${2:?usage: run.sh SOL_CHECKOUT OUT_DIR [N] [M]}
n=${3:-50}
m=${4:-10}
kg=${KG_BENCH:-target/release/kg-bench}
py=${PYTHON:-python3}
problem=problems/core/gelu_tanh_bf16_gemma2_2b
# Absolute: SOL-ExecBench starts its workers in other directories, with this PYTHONPATH.
sol=$(cd "$sol" && pwd)
since() { "$py" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$1"; }
mkdir -p "$out"
"$py" "$(dirname "$0")/make.py" "$out/pop" "$n" || exit 2
t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$kg" run problems/core --solutions "$out/pop" --filter problem:gelu_tanh_bf16_gemma2_2b --rerun -q -o "$out/kg" ${KG_FLAGS:-} > "$out/kg.log" 2>&1
rc=$?
echo "kernelgate $n $(since "$t0") $rc" > "$out/walls.txt"
k=0
for f in $(ls "$out/pop/gelu_tanh_bf16_gemma2_2b/"*.json | sort | head -"$m"); do
  name=$(basename "$f" .json)
  t0=$(date +%s.%N)
  PYTHONPATH="$sol/src${PYTHONPATH:+:$PYTHONPATH}" "$py" -c 'import sys; from sol_execbench.cli import cli; cli(sys.argv[1:])' \
    "$problem" --solution "$f" --output "$out/sol-$name.jsonl" > "$out/sol-$name.log" 2>&1
  rc=$?
  echo "sol-execbench-one $name $(since "$t0") $rc" >> "$out/walls.txt"
  k=$((k + 1))
done
"$py" - "$out" "$n" <<'PY'
import glob, json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
walls = [l.split() for l in open(os.path.join(out, "walls.txt"))]
kg_s = float(walls[0][2])
sol = [(w[1], float(w[2])) for w in walls[1:]]
per_kg = kg_s / n
per_sol = sum(s for _, s in sol) / max(len(sol), 1)
print(f"kernelgate: {n} candidates in {kg_s:.1f} s = {per_kg:.2f} s per candidate")
print(f"SOL-ExecBench CLI: {len(sol)} candidates, {per_sol:.2f} s per candidate")
print(f"ratio: {per_sol / per_kg:.1f}x fewer seconds per candidate with kernelgate")
def statuses(path):
    try:
        return [json.loads(l)["evaluation"]["status"] for l in open(path) if l.strip()]
    except (OSError, KeyError, TypeError, ValueError):
        return None
same = diff = 0
for name, _ in sol:
    a = statuses(os.path.join(out, "kg", "gelu_tanh_bf16_gemma2_2b", name + ".jsonl"))
    b = statuses(os.path.join(out, f"sol-{name}.jsonl"))
    if a == b:
        same += 1
    else:
        diff += 1
        print(f"  {name}: kernelgate {a} / SOL-ExecBench {b}")
print(f"statuses identical for {same} of {same + diff} candidates run by both")
PY
