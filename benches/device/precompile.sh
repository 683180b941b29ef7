#!/usr/bin/env bash
# Device call (issue 24): Triton kernels compiled ahead (`kg-bench run --precompile`), ~8 min.
# 1. The population (50 Triton GELU variants, benches/population/make.py), `--precompile on`
#    and `off` alternated twice, each with a fresh KG_CACHE_DIR (Triton caches included).
# 2. A precompiler trying to reach the GPU (reach_gpu.py: the honest GELU whose module, where
#    torch sees no GPU, asks the CUDA driver itself with every device made visible, and leaves
#    what it found in its own Triton cache for its candidate to print) after the honest GELU.
# 3. `problems/core` bundled with the precompiler, `--gpus all`.
# 4. The population against SOL-ExecBench's CLI (benches/population/run.sh), if $B/solx exists.
# Reads $KG_DEVICE_DIR/bin (kg-bench); results in $OUT/r.tgz. All of it takes longer than one
# call may: KG_PARTS picks parts (default "1 2 reach bundled sol"; 1 and 2 are the two
# on/off pairs), e.g. KG_PARTS="1 reach bundled" then KG_PARTS="2 sol".
here=$(dirname "$0")
. "$here/common.sh"
parts=" ${KG_PARTS:-1 2 reach bundled sol} "
want() { [[ $parts == *" $1 "* ]]; }
G=problems/core/gelu_tanh_bf16_gemma2_2b
python3 benches/population/make.py $R/popsol 50 > /dev/null
runs=()
if want startup; then
  # Where a run's first seconds go, before its first candidate starts: debug log, timestamped.
  mkdir -p $R/pop3/gelu_tanh_bf16_gemma2_2b && cp $R/popsol/gelu_tanh_bf16_gemma2_2b/pop00[0-2]*.json $R/pop3/gelu_tanh_bf16_gemma2_2b/
  export KG_CACHE_DIR=/tmp/kgc-startup
  date -u +%FT%T.%NZ > $R/startup.t0
  KG_LOG=debug timeit startup 60 $B/bin/kg-bench run problems/core --solutions $R/pop3 --filter problem:gelu_tanh_bf16_gemma2_2b --rerun -o $R/startup-out --gpus all --max-workloads 1
  date -u +%FT%T.%NZ >> $R/startup.err
  pack
fi
for i in 1 2; do
  want $i || continue
  for pc in on off; do
    export KG_CACHE_DIR=/tmp/kgc-pop-$pc-$i
    pop_run pop-$pc-$i 200 --precompile $pc
    runs+=($R/pop-$pc-$i)
    pack
  done
done
if want reach; then
mkdir -p $R/reach/gelu_tanh_bf16_gemma2_2b
python3 "$here/precompile_reach.py" $G/solutions/triton_flat.json $R/reach/gelu_tanh_bf16_gemma2_2b
export KG_CACHE_DIR=/tmp/kgc-reach
timeit reach 120 $B/bin/kg-bench run problems/core --solutions $R/reach --filter problem:gelu_tanh_bf16_gemma2_2b --rerun -o $R/reach-out --gpus all --max-workloads 2
grep -h -o "kg-redteam-precompiler[^\"]*" $R/reach-out/gelu_tanh_bf16_gemma2_2b/*.jsonl | sort | uniq -c | tee $R/reach.txt
runs+=($R/reach-out)
fi
if want bundled; then
export KG_CACHE_DIR=/tmp/kgc-bundled
timeit core-bundled 150 $B/bin/kg-bench run problems/core --solutions bundled -q -o $R/core-bundled --gpus all
runs+=($R/core-bundled)
pack
fi
python3 "$here/precompile_summary.py" "${runs[@]}" | tee $R/summary.txt
if want sol && [ -d $B/solx ]; then
  pop_vs_sol
fi
rm -rf $R/popsol
cat $R/walls.txt
pack
