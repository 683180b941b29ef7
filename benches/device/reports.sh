#!/usr/bin/env bash
# Issue 27 on a GPU: the reference and bundled runs of problems/core, kg-solar's analyses, one
# HTML report of both, and a comparison of two reference runs (Markdown and JSON).
# Run from the repository root through `device`, carrying $KG_DEVICE_DIR/bin.
source "$(dirname "$0")/common.sh"
K=$B/bin
timeit ref 280 $K/kg-bench run problems/core --solutions reference --gpus all -q -o $R/ref
pack
timeit bun 280 $K/kg-bench run problems/core --solutions bundled --gpus all -q -o $R/bun
pack
timeit solar 120 $K/kg-bench solar analyze problems/core --json -o $R/sol
timeit report 60 $K/kg-bench report $R/ref $R/bun --sol $R/sol -o $R/report.html
pack
timeit ref2 280 $K/kg-bench run problems/core --solutions reference --gpus all -q -o $R/ref2
timeit compare 60 $K/kg-bench compare $R/ref $R/ref2 --markdown
timeit comparejson 60 $K/kg-bench compare $R/ref $R/ref2 --json
rm -rf $R/sol
pack
