#!/usr/bin/env bash
# The H200 check of issue 23 item 6: five real AgentKernelArena triton2triton/vllm tasks whose
# optimised kernel is byte-identical to the original must each read a held-out speedup whose
# interval contains 1.0, called neither gain nor loss (one run a side read 1.60x for
# triton_temperature; docs/evidence/heldout.md).
#
#   prepare AKA_GIT_DIR DEST   on the build machine (no GPU): the five tasks at AKA_COMMIT with
#                              AKA's CUDA-graph helpers materialised (as setup_workspace()
#                              does), a run directory with optimised = original, the binary
#                              ($KG_HELDOUT, else a release build of this tree) and this script
#   run DEST                   on the device: generate, eval (--perf-repeats, default 5), and
#                              the check; exit 0 only when every task passes it
#
# AKA_GIT_DIR is a clone or a bare mirror of AMD-AGI/AgentKernelArena that has AKA_COMMIT.
set -euo pipefail

AKA_COMMIT="${AKA_COMMIT:-d6f7c8a4}"
TASKS=(triton_batch_memcpy triton_log_softmax triton_rms_norm triton_temperature triton_write_zeros_to_output)
RUN=run_20261129_150000
STAMP=20261129_150000

die() {
  echo "error: $*" >&2
  exit 2
}

prepare() {
  local aka="$1" dest="$2"
  [ -d "$aka" ] || die "\`$aka\` is not a directory"
  mkdir -p "$dest"
  dest="$(cd "$dest" && pwd)"
  [ ! -e "$dest/work" ] || die "\`$dest/work\` exists; remove it first"
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  local paths=(src/perf_helper_materialization.py src/tools/materialize_perf_helpers.py src/tools/perf)
  for t in "${TASKS[@]}"; do paths+=("tasks/triton2triton/vllm/$t"); done
  git -C "$aka" archive "$AKA_COMMIT" "${paths[@]}" | tar -x -C "$src"
  local task_dirs=()
  for t in "${TASKS[@]}"; do task_dirs+=("$src/tasks/triton2triton/vllm/$t"); done
  # AKA's own tool: copies each task under --out and fills the AKA-GENERATED region.
  python3 "$src/src/tools/materialize_perf_helpers.py" task "${task_dirs[@]}" --out "$dest/work/tasks"
  for t in "${TASKS[@]}"; do
    local runner="$dest/work/tasks/triton2triton/vllm/$t/scripts/task_runner.py"
    if grep -q "helpers were not materialized" "$runner"; then
      die "\`$runner\` still holds AKA's helper stub"
    fi
    # The run: each workspace is the task itself (optimised = original), as AKA leaves one.
    local ws="$dest/work/run/$RUN/triton2triton_vllm_${t}_$STAMP"
    mkdir -p "$ws"
    cp -R "$dest/work/tasks/triton2triton/vllm/$t/." "$ws/"
    printf 'task_name: triton2triton/vllm/%s\npass_compilation: true\npass_correctness: true\nspeedup_ratio: 1.0\nscore: 220.0\n' \
      "$t" >"$ws/task_result.yaml"
  done
  local bin="${KG_HELDOUT:-}"
  if [ -z "$bin" ]; then
    local root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
    (cd "$root" && cargo build --release -p kg-heldout-cli)
    bin="${CARGO_TARGET_DIR:-$root/target}/release/kg-heldout"
  fi
  cp "$bin" "$dest/kg-heldout"
  cp "${BASH_SOURCE[0]}" "$dest/h200_identical_check.sh"
  echo "prepared $dest: ${#TASKS[@]} tasks at AKA $AKA_COMMIT, run $RUN with optimised = original"
}

run() {
  local dest="$1"
  cd "$dest"
  local out="${OUT:-$PWD/out}"
  mkdir -p "$out"
  ./kg-heldout generate --tasks-dir work/tasks --output-dir work/held_out_tests
  local code=0
  ./kg-heldout eval --run-dir "work/run/$RUN" --heldout-dir work/held_out_tests \
    --tasks-dir work/tasks --python python3 --timeout 240 \
    --perf-repeats "${PERF_REPEATS:-5}" --json >"$out/heldout_eval.json" || code=$?
  echo "kg-heldout eval exit code: $code"
  [ -s "$out/heldout_eval.json" ] || die "eval wrote no results (exit $code; 3 = no usable device)"
  # The typed results come back with the check's output; the logs stay on the device.
  shopt -s nullglob
  cp "work/run/${RUN}_heldout/heldout_summary.yaml" "$out/"
  for d in "work/run/${RUN}_heldout"/*/; do
    mkdir -p "$out/$(basename "$d")"
    cp "$d/heldout_task_result.yaml" "$out/$(basename "$d")/"
  done
  python3 - "$out/heldout_eval.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
bad = 0
print(f"{'task':<44} {'status':<10} {'speedup':>8}  {'interval':<17} {'conf':>5}  call")
for r in doc["results"]:
    i = r.get("speedup_interval") or {}
    ok = (
        r["generalization_status"] == "both_pass"
        and r.get("speedup_status") == "measured"
        and r.get("speedup_call") == "not_called"
        and i.get("low", 2.0) <= 1.0 <= i.get("high", 0.0)
    )
    bad += not ok
    print(
        f"{r['task_name']:<44} {r['generalization_status']:<10} {r['speedup_ratio']:>8.4f}  "
        f"[{i.get('low', 0):.4f}, {i.get('high', 0):.4f}] {i.get('confidence', 0):>5.3f}  "
        f"{r.get('speedup_call')}{'' if ok else '   <-- FAILS THE CHECK'}"
    )
print("order of the first task's runs:", [f"{p['side']}{p['repeat']}" for p in doc["results"][0]["perf_runs"]] if doc["results"] else [])
print(f"{len(doc['results']) - bad} of {len(doc['results'])} tasks read 1.0 inside their interval, not called")
sys.exit(1 if bad or len(doc["results"]) != 5 else 0)
PY
}

case "${1:-}" in
  prepare) [ $# -eq 3 ] || die "usage: $0 prepare AKA_GIT_DIR DEST"; prepare "$2" "$3" ;;
  run) [ $# -eq 2 ] || die "usage: $0 run DEST"; run "$2" ;;
  *) die "usage: $0 prepare AKA_GIT_DIR DEST | run DEST" ;;
esac
