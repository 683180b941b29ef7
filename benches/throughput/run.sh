#!/usr/bin/env bash
# kernelgate's own throughput: problems/core (references, then the bundled solutions) end to
# end, each as a whole `kg-bench run` process, with a cold build cache (a fresh KG_CACHE_DIR)
# and then warm (the same cache again). Prints the walls; traces stay in OUT_DIR.
#
#   benches/throughput/run.sh [OUT_DIR]     (env: KG_BENCH, KG_FLAGS such as `--gpus all`)
set -uo pipefail
out=${1:-throughput-out}
kg=${KG_BENCH:-target/release/kg-bench}
[ -x "$kg" ] || { echo "error: \`$kg\` is not an executable kg-bench (set KG_BENCH, or cargo build --release)" >&2; exit 2; }
mkdir -p "$out"
export KG_CACHE_DIR="$out/cache"
rm -rf "$KG_CACHE_DIR"
printf '%-10s %-6s %8s %5s\n' set cache wall_s exit | tee "$out/walls.txt"
for cache in cold warm; do
  for set in reference bundled; do
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$kg" run problems/core --solutions "$set" --rerun -q -o "$out/$set-$cache" ${KG_FLAGS:-} > "$out/$set-$cache.log" 2>&1
    rc=$?
    printf '%-10s %-6s %8.1f %5s\n' "$set" "$cache" "$(echo "$(date +%s.%N) - $t0" | bc)" "$rc" | tee -a "$out/walls.txt"
  done
done
