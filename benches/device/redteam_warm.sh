#!/usr/bin/env bash
# Issue 24: the red-team cases with candidates that prepare Triton as they start (KG_WARM): the
# honest Triton solutions, the GPU-only attacks, and those aimed at the harness's modules (the
# guard's snapshot is taken after the warm-up). Carries $KG_DEVICE_DIR/bin and /xtask.
source "$(dirname "$0")/common.sh"
CASES=honest_triton_gelu_flat,honest_triton_rmsnorm_rows,honest_triton_silu_tiles,honest_triton_two_kernels_silu,gpu_device_memory_scan,gpu_events_start_rerecorded,gpu_patch_event_elapsed_time,gpu_patch_synchronize,gpu_side_stream_no_sync,gpu_honest_side_stream_synced,compute_in_decrypt_code_swap,compute_in_key_hook,forge_extra_timing_samples,judge_socket_hijack,plant_startup_file,poisoned_later_judge
CARGO_MANIFEST_DIR=$PWD/xtask timeit redteam 420 $PWD/$B/xtask/xtask redteam --device cuda:0 --kg-bench $PWD/$B/bin/kg-bench --python python3 --case $CASES
tail -30 $R/redteam.out
pack
