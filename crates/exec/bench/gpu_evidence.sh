#!/usr/bin/env bash
# Device run for docs/evidence/evaluate.md. Usage: crates/exec/bench/gpu_evidence.sh KG_BENCH OUTDIR [part]
# part: core (corpus + pytorch/triton SOL examples + benchmarks), cpp (cuda_cpp SOL examples),
# bench (benchmarks: default CUPTI timing, plus event timing and CUDA graphs for comparison),
# corpus (validate + reference and bundled corpus runs), auto (--device auto claim),
# bundled (bundled Triton solutions only), release (issue 5: `xtask release` of problems/core on
# the H200 and `score official`; XTASK names the carried xtask binary, TIMING=events times both runs by events), redteam (issue 8; CASES
# and TAG select and name a subset), sandbox (what the host allows + one sandboxed GPU run),
# overhead (bundled corpus, one workload a problem, with and without --no-sandbox; ROUNDS alternations, default 2), diag (matmul
# with CUPTI, events and --no-sandbox, rmsnorm Triton launches, ncu, clocks and throttling),
# modes (the matmul in bare processes with its inputs held four ways: matmul_modes.py),
# repro (criteria (a) and (b) only: 5 CUPTI runs of each benchmark kernel, then ncu, the add's
# reference as the candidate twice, add_conditions.py),
# cupti (criterion (c): Kineto against kgcupti side by side, cupti_direct.py; KINETO_STOP=1 adds
# cupti_stop.py),
# ref (the reference corpus run alone; TIMING=events times it by events),
# sol (the pytorch and triton SOL-ExecBench examples alone).
# Every part packs its results into OUTDIR/results.tgz as it ends, so a later timeout loses nothing.
set -u
KG=$1; OUT=$2; PART=${3:-core}
EX=.device-bin/exec/sol-examples
B=crates/exec/bench
mkdir -p "$OUT/r"
export PYTHON_BIN=python3
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/log.txt"; }
{ nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; nvcc --version | tail -2; python3 -c 'import torch,triton;print(torch.__version__, triton.__version__)'; } > "$OUT/r/env.txt" 2>&1
sol_of() { ls "$1"/solution_*.json | head -1; }
# run_t OUTFILE CMD...: runs CMD with stdout+stderr to OUTFILE, then appends exit code and wall seconds.
run_t() { local f=$1; shift; local t0; t0=$(date +%s%N); "$@" > "$f" 2>&1; local rc=$?; echo "exit $rc wall_ms $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$f"; }
if [ "$PART" = core ]; then
  log validate; run_t "$OUT/r/validate.txt" $KG dataset validate problems/core --device cuda:0
  log core-ref; run_t "$OUT/r/core-ref.txt" $KG run problems/core --device cuda:0 -o "$OUT/r/core-ref"
  log core-bundled; run_t "$OUT/r/core-bundled.txt" $KG run problems/core --solutions bundled --device cuda:0 -o "$OUT/r/core-bundled"
  for d in $EX/pytorch_* $EX/triton_*; do n=$(basename $d); log "$n"
    run_t "$OUT/r/sol-$n.txt" $KG evaluate $d --solution $(sol_of $d) --device cuda:0 -o "$OUT/r/sol-$n.jsonl"; done
fi
if [ "$PART" = core ] || [ "$PART" = bench ]; then
  for k in add_1m matmul_4096_bf16; do for i in 1 2 3 4 5; do log "repro $k $i"
    $KG evaluate $B/$k --solution $B/$k/solution.json --device cuda:0 --rounds 2 --iterations 100 --json > "$OUT/r/repro-$k-$i.json" 2>>"$OUT/r/repro-err.txt"; done
    for i in 1 2 3; do log "events $k $i"
    $KG evaluate $B/$k --solution $B/$k/solution.json --device cuda:0 --rounds 2 --iterations 100 --timing events --json > "$OUT/r/events-$k-$i.json" 2>>"$OUT/r/repro-err.txt"; done
    $KG evaluate $B/$k --solution $B/$k/solution.json --device cuda:0 --rounds 2 --iterations 100 --timing cuda-graph --json > "$OUT/r/graph-$k.json" 2>>"$OUT/r/repro-err.txt"; done
  log ncu; timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 $B/ncu_ops.py > "$OUT/r/ncu.csv" 2> "$OUT/r/ncu-err.txt"
fi
if [ "$PART" = sol ]; then
  for d in $EX/pytorch_* $EX/triton_*; do n=$(basename $d); log "$n"
    run_t "$OUT/r/sol-$n.txt" $KG evaluate $d --solution $(sol_of $d) --device cuda:0 -o "$OUT/r/sol-$n.jsonl"; done
fi
if [ "$PART" = auto ]; then
  log auto; run_t "$OUT/r/auto.txt" $KG evaluate problems/core/rmsnorm_bf16_qwen2_5_0_5b --solution reference --device auto --max-workloads 2 -o "$OUT/r/auto.jsonl"
fi
if [ "$PART" = corpus ]; then
  log validate; run_t "$OUT/r/validate.txt" $KG dataset validate problems/core --device cuda:0
  log core-ref; run_t "$OUT/r/core-ref.txt" $KG run problems/core --device cuda:0 -o "$OUT/r/core-ref"
  log core-bundled; run_t "$OUT/r/core-bundled.txt" $KG run problems/core --solutions bundled --device cuda:0 -o "$OUT/r/core-bundled"
fi
if [ "$PART" = ref ]; then
  log core-ref; run_t "$OUT/r/core-ref.txt" $KG run problems/core --device cuda:0 ${TIMING:+--timing $TIMING} -o "$OUT/r/core-ref"
fi
if [ "$PART" = cpp ]; then
  for d in $EX/cuda_cpp_*; do n=$(basename $d); log "$n"
    run_t "$OUT/r/sol-$n.txt" $KG evaluate $d --solution $(sol_of $d) --device cuda:0 --compile-timeout 300 -o "$OUT/r/sol-$n.jsonl"; done
fi
if [ "$PART" = bundled ]; then
  log core-bundled; run_t "$OUT/r/core-bundled.txt" $KG run problems/core --solutions bundled --device cuda:0 -o "$OUT/r/core-bundled"
fi
if [ "$PART" = release ]; then
  log release; run_t "$OUT/r/release.txt" env CARGO_MANIFEST_DIR="$PWD/xtask" "$XTASK" release --corpus problems/core --hardware h200 --device cuda:0 --kg-bench "$(realpath $KG)" --python python3 ${TIMING:+--timing $TIMING} -o "$OUT/r/rel"
  log score-official; run_t "$OUT/r/score-official.txt" $KG score official "$OUT/r/rel/release-bundle.json"
fi
if [ "$PART" = redteam ]; then
  # CASES (optional): comma-separated case names, to split the corpus over calls.
  log "redteam ${CASES:-all}"; run_t "$OUT/r/redteam${TAG:-}.txt" env CARGO_MANIFEST_DIR="$PWD/xtask" "$XTASK" redteam --device cuda:0 --kg-bench "$(realpath $KG)" --python python3 ${CASES:+--case "$CASES"}
fi
if [ "$PART" = sandbox ]; then
  # What this host allows, and one sandboxed GPU evaluation (its isolation line is in the traces).
  { id; uname -r; for ns in -n -m -Urn; do unshare $ns true 2>&1 && echo "unshare $ns: ok" || echo "unshare $ns: refused"; done
    cat /proc/sys/kernel/yama/ptrace_scope 2>&1; ls -l /dev/nvidia* 2>&1; cat /proc/self/status | grep -E '^(Cap|Seccomp|NoNewPrivs)';
    mount | grep -E ' /(tmp|dev/shm|sys/fs/cgroup) ' ; cat /sys/fs/cgroup/cgroup.controllers 2>&1; python3 -c 'import sys; print(sys.executable, sys.prefix)'; } > "$OUT/r/host.txt" 2>&1
  log sandbox-eval; run_t "$OUT/r/sandbox-eval.txt" $KG evaluate problems/core/rmsnorm_bf16_qwen2_5_0_5b --solution problems/core/rmsnorm_bf16_qwen2_5_0_5b/solutions/triton_rows.json --device cuda:0 --max-workloads 2 -o "$OUT/r/sandbox-eval.jsonl"
  # Large outputs (the device-memory hand-over) and CUPTI inside the sandbox; then the same with
  # every layer required (exit 2 naming what is missing, where a layer does not hold here).
  log sandbox-pool; run_t "$OUT/r/sandbox-pool.txt" $KG evaluate problems/core/bmm_bf16_qwen2_5_0_5b_attn_scores --solution reference --device cuda:0 -o "$OUT/r/sandbox-pool.jsonl"
  $KG verify "$OUT/r/sandbox-pool.jsonl" --problem problems/core/bmm_bf16_qwen2_5_0_5b_attn_scores > "$OUT/r/sandbox-verify.txt" 2>&1; echo "verify exit $?" >> "$OUT/r/sandbox-verify.txt"
  log sandbox-require; run_t "$OUT/r/sandbox-require.txt" $KG evaluate problems/core/bmm_bf16_qwen2_5_0_5b_attn_scores --solution reference --device cuda:0 --require-sandbox --max-workloads 1
fi
if [ "$PART" = diag ]; then
  # Session 4's open questions, side by side in one call: why the 4096^3 matmul read 206-264 us
  # (178.9 us in session 2; ncu 176.6 us), and how bimodal single-kernel Triton launches are.
  for i in 1 2 3; do for mode in cupti events nosandbox; do log "diag matmul $mode $i"
    extra=; [ $mode = events ] && extra="--timing events"; [ $mode = nosandbox ] && extra=--no-sandbox
    $KG evaluate $B/matmul_4096_bf16 --solution $B/matmul_4096_bf16/solution.json --device cuda:0 --rounds 2 --iterations 100 $extra -o "$OUT/r/diag-matmul-$mode-$i.jsonl" > /dev/null 2>>"$OUT/r/diag-err.txt"; done; done
  for i in 1 2 3 4 5; do log "diag rmsnorm triton $i"
    $KG evaluate problems/core/rmsnorm_bf16_qwen2_5_0_5b --solution problems/core/rmsnorm_bf16_qwen2_5_0_5b/solutions/triton_rows.json --device cuda:0 --max-workloads 2 -o "$OUT/r/diag-rmsnorm-$i.jsonl" > /dev/null 2>>"$OUT/r/diag-err.txt"; done
  log ncu; timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 $B/ncu_ops.py > "$OUT/r/ncu.csv" 2> "$OUT/r/ncu-err.txt"
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv > "$OUT/r/diag-smi.csv" 2>&1
fi
if [ "$PART" = modes ]; then
  # Session 6: is the matmul's slow mode per process, per input placement or per time window?
  # 8 bare processes (matmul_modes.py), then 3 evaluations whose notes name the kernels run.
  for i in 1 2 3 4 5 6 7 8; do log "modes $i"; python3 $B/matmul_modes.py $i >> "$OUT/r/modes.jsonl" 2>>"$OUT/r/modes-err.txt"; done
  for i in 1 2 3; do log "modes matmul eval $i"
    $KG evaluate $B/matmul_4096_bf16 --solution $B/matmul_4096_bf16/solution.json --device cuda:0 --rounds 2 --iterations 100 -o "$OUT/r/modes-matmul-$i.jsonl" > /dev/null 2>>"$OUT/r/modes-err.txt"; done
fi
if [ "$PART" = repro ]; then
  # Criteria (a) and (b) alone, default timing (CUPTI): 5 separate runs of each kernel, then ncu.
  for k in matmul_4096_bf16 add_1m; do for i in 1 2 3 4 5; do log "repro $k $i"
    $KG evaluate $B/$k --solution $B/$k/solution.json --device cuda:0 --rounds 2 --iterations 100 -o "$OUT/r/repro-$k-$i.jsonl" > /dev/null 2>>"$OUT/r/repro-err.txt"; done; done
  log ncu; timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 $B/ncu_ops.py > "$OUT/r/ncu.csv" 2> "$OUT/r/ncu-err.txt"
  # The same add's own reference code as the candidate (judge and candidate processes timing
  # the same code), and the add under the conditions around it in a bare process.
  for i in 1 2; do log "repro add_1m reference $i"
    $KG evaluate $B/add_1m --solution reference --device cuda:0 --rounds 2 --iterations 100 -o "$OUT/r/repro-add-ref-$i.jsonl" > /dev/null 2>>"$OUT/r/repro-err.txt"; done
  log add-conditions; timeout 120 python3 $B/add_conditions.py > "$OUT/r/add-conditions.jsonl" 2>&1
fi
if [ "$PART" = cupti ]; then
  # Criterion (c): what starting, stopping and reading the CUDA activity profiler costs.
  log cupti-direct; timeout 240 python3 $B/cupti_direct.py > "$OUT/r/cupti-direct.jsonl" 2> "$OUT/r/cupti-direct-err.txt"
  [ -n "${KINETO_STOP:-}" ] && { log cupti-stop; timeout 120 python3 $B/cupti_stop.py > "$OUT/r/cupti-stop.jsonl" 2> "$OUT/r/cupti-stop-err.txt"; }
fi
if [ "$PART" = overhead ]; then
  # Corpus wall time with and without the optional defence (the candidate sandbox), alternated.
  for i in $(seq 1 ${ROUNDS:-2}); do for mode in on off; do log "overhead $mode $i"
    flag=; [ $mode = off ] && flag=--no-sandbox
    run_t "$OUT/r/overhead-$mode-$i.txt" $KG run problems/core --solutions bundled --device cuda:0 --max-workloads 1 $flag -o "$OUT/r/overhead-$mode-$i"; done; done
fi
log done
tar czf "$OUT/results.tgz" -C "$OUT" r log.txt
