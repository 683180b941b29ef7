#!/usr/bin/env bash
# Issue 25: behaviour unchanged by the worker modules' split. The reference corpus
# (problems/core, reference solutions) with the binary from before the split ($KG_DEVICE_DIR/old)
# and after it ($KG_DEVICE_DIR/bin), alternated twice in this one call; the bundled solutions
# after; then the red-team cases whose attacks aim at the harness's modules, and the GPU-only
# ones, with the new binary. Run from the repository root through `device`, carrying
# $KG_DEVICE_DIR/bin, $KG_DEVICE_DIR/old and $KG_DEVICE_DIR/xtask.
source "$(dirname "$0")/common.sh"
for i in 1 2; do
  timeit "new_ref$i" 200 $B/bin/kg-bench run problems/core --solutions reference --device cuda:0 -o $R/new_ref$i
  timeit "old_ref$i" 200 $B/old/kg-bench run problems/core --solutions reference --device cuda:0 -o $R/old_ref$i
  pack
done
timeit new_bundled 200 $B/bin/kg-bench run problems/core --solutions bundled --device cuda:0 -o $R/new_bundled
pack
CASES=compute_in_decrypt_code_swap,compute_in_key_hook,forge_extra_timing_samples,judge_socket_hijack,newline_flood,plant_startup_file,poisoned_later_judge,timed_garbage_handover_patched,timed_garbage_device_handover_patched,gpu_device_memory_scan,gpu_patch_event_elapsed_time,gpu_patch_synchronize,gpu_side_stream_no_sync,gpu_honest_side_stream_synced
CARGO_MANIFEST_DIR=$PWD/xtask timeit redteam 400 $PWD/$B/xtask/xtask redteam --device cuda:0 --kg-bench $PWD/$B/bin/kg-bench --python python3 --case $CASES
pack
python3 benches/device/summarize.py $R/new_ref1 $R/old_ref1 $R/new_ref2 $R/old_ref2 $R/new_bundled > $R/summary.txt 2>&1 || true
pack
