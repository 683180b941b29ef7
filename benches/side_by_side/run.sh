#!/usr/bin/env bash
# Side by side: SOL-ExecBench's own harness and kg-bench on the same problems, in one run,
# interleaved, each timed as a whole process. See README.md beside this file.
#
#   benches/side_by_side/run.sh SOL_CHECKOUT EXAMPLES_DIR [OUT_DIR]
#
# SOL_CHECKOUT: a checkout of NVIDIA/SOL-ExecBench (its `src/` is put on PYTHONPATH; never
#   vendored here). EXAMPLES_DIR: problem directories (at any depth) each holding one
#   `solution_*.json` beside its `definition.json` (SOL-ExecBench's `examples/` layout).
# Environment: KG_BENCH (default target/release/kg-bench), PYTHON (default python3),
#   ROUNDS (default 1: how many times the whole comparison repeats), KG_FLAGS (extra flags for
#   kg-bench run, e.g. `--gpus all`).
set -uo pipefail
sol=${1:?usage: run.sh SOL_CHECKOUT EXAMPLES_DIR [OUT_DIR]}
examples=${2:?usage: run.sh SOL_CHECKOUT EXAMPLES_DIR [OUT_DIR]}
out=${3:-side-by-side-out}
kg=${KG_BENCH:-target/release/kg-bench}
py=${PYTHON:-python3}
rounds=${ROUNDS:-1}
mkdir -p "$out"
[ -d "$sol/src/sol_execbench" ] || { echo "error: \`$sol\` is not a SOL-ExecBench checkout (no src/sol_execbench)" >&2; exit 2; }
# Absolute: SOL-ExecBench starts its workers in other directories, with this PYTHONPATH.
sol=$(cd "$sol" && pwd)
[ -x "$kg" ] || { echo "error: \`$kg\` is not an executable kg-bench (set KG_BENCH, or cargo build --release)" >&2; exit 2; }
mapfile -t problems < <(find "$examples" -name definition.json -printf '%h\n' | sort)
[ ${#problems[@]} -gt 0 ] || { echo "error: no definition.json under \`$examples\`" >&2; exit 2; }
now() { date +%s.%N; }
# Seconds since $1 (no `bc` needed: some machines lack it).
since() { "$py" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$1"; }
walls="$out/walls.tsv"
printf 'round\ttool\tproblem\twall_s\texit\n' > "$walls"
for r in $(seq 1 "$rounds"); do
  # SOL-ExecBench: one CLI process per problem (how it is run), alternating with kg-bench's
  # run of the whole set (one process, how kg-bench is run); the order flips every round.
  sol_first=$(( r % 2 ))
  run_sol() {
    for p in "${problems[@]}"; do
      s=$(ls "$p"/solution_*.json 2>/dev/null | head -1)
      [ -n "$s" ] || { echo "warning: no solution_*.json in \`$p\`; skipped" >&2; continue; }
      name=$(echo "${p#$examples/}" | tr '/' '_')
      t0=$(now)
      PYTHONPATH="$sol/src${PYTHONPATH:+:$PYTHONPATH}" "$py" -c 'import sys; from sol_execbench.cli import cli; cli(sys.argv[1:])' \
        "$p" --solution "$s" --output "$out/sol-$r-$name.jsonl" --compile-timeout 600 > "$out/sol-$r-$name.log" 2>&1
      rc=$?
      printf '%s\tsol-execbench\t%s\t%s\t%s\n' "$r" "${p#$examples/}" "$(since "$t0")" "$rc" >> "$walls"
    done
  }
  run_kg() {
    t0=$(now)
    # shellcheck disable=SC2086
    "$kg" run "$examples" --solutions bundled --rerun -q -o "$out/kg-$r" --compile-timeout 600 ${KG_FLAGS:-} > "$out/kg-$r.log" 2>&1
    rc=$?
    printf '%s\tkernelgate\t(all %s)\t%s\t%s\n' "$r" "${#problems[@]}" "$(since "$t0")" "$rc" >> "$walls"
  }
  if [ "$sol_first" = 1 ]; then run_sol; run_kg; else run_kg; run_sol; fi
done
"$py" - "$walls" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rounds = sorted({r["round"] for r in rows}, key=int)
print(f"{'round':>5}  {'SOL-ExecBench s':>16}  {'kernelgate s':>13}  {'ratio':>6}")
for rd in rounds:
    sol = sum(float(r["wall_s"]) for r in rows if r["round"] == rd and r["tool"] == "sol-execbench")
    kg = sum(float(r["wall_s"]) for r in rows if r["round"] == rd and r["tool"] == "kernelgate")
    print(f"{rd:>5}  {sol:>16.1f}  {kg:>13.1f}  {sol / kg if kg else float('nan'):>5.2f}x")
for r in rows:
    if r["exit"] not in ("0",):
        print(f"note: {r['tool']} {r['problem']} round {r['round']} exited {r['exit']} (see its log)")
PY
