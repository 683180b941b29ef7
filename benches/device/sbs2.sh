set -u
B=.device-bin/s34; R=$OUT/r; mkdir -p $R
export PYTHON_BIN=python3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $B/whl/*.whl > $R/pip.txt 2>&1
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm --format=csv,noheader | tee $R/smi.txt
export KG_CACHE_DIR=/tmp/kgcache-sbs2-$$
PYTHONPATH=/tmp/site KG_BENCH=$B/bin/kg-bench KG_FLAGS="--gpus all" timeout 560 bash benches/side_by_side/run.sh $B/solx $B/sol $R/sbs > $R/sbs.txt 2>&1; echo "side-by-side rc=$?" | tee -a $R/sbs.txt; cat $R/sbs.txt; cat $R/sbs/walls.tsv
tail -3 $R/sbs/sol-1-triton_rmsnorm.log
(cd $OUT && tar czf r.tgz r)
