# Sourced by the device scripts beside it: where they read (`KG_DEVICE_DIR`, README.md) and
# write ($OUT/r), their helpers, SOL-ExecBench's Python dependencies installed from wheels
# into /tmp/site, and the GPU named in smi.txt.
set -u
B=${KG_DEVICE_DIR:-.device-bin/s34}; R=$OUT/r; mkdir -p $R
export PYTHON_BIN=python3
log() { echo "$@" | tee -a $R/walls.txt; }
timeit() { local name=$1 lim=$2; shift 2; local t0=$(date +%s.%N); timeout $lim "$@" > $R/$name.out 2> $R/$name.err; local rc=$?; local t1=$(date +%s.%N); log "$name rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))")"; }
pack() { (cd $OUT && tar czf r.tgz r); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $B/whl/*.whl > $R/pip.txt 2>&1; log "pip rc=$?"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm --format=csv,noheader | tee $R/smi.txt
# The population (written by benches/population/make.py into $R/popsol) in one kg-bench run:
# pop_run NAME LIMIT_S FLAGS... -> $R/NAME, its wall in walls.txt.
pop_run() { local name=$1 lim=$2; shift 2; timeit $name $lim $B/bin/kg-bench run problems/core --solutions $R/popsol --filter problem:gelu_tanh_bf16_gemma2_2b --rerun -q -o $R/$name --gpus all "$@"; }
# The population against SOL-ExecBench's CLI (benches/population/run.sh; needs $B/solx and the
# wheels), kg-bench with `--gpus all` and the flags given: -> $R/pop-sol, its table printed.
pop_vs_sol() {
  KG_CACHE_DIR=/tmp/kgc-sbs PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all $*" timeout 300 bash benches/population/run.sh $B/solx $R/pop-sol 50 10 > $R/pop-sol.txt 2>&1
  cat $R/pop-sol.txt; rm -rf $R/pop-sol/pop
}
