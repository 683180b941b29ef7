"""Where a cold `cuda_cpp` build's time goes (issue 24): builds one SOL-ExecBench-style
solution (`solution_*.json` in PROBLEM_DIR) with torch's extension builder, as kernelgate's
builder does, once as given and once with torch/extension.h's C++-frontend half left out
(`-DTORCH_INDUCTOR_CPP_WRAPPER`, a diagnostic only), each with nvcc's `--time` phase table.

    python3 nvcc_phases.py PROBLEM_DIR OUT_DIR
"""
import csv
import glob
import json
import os
import sys
import tempfile
import time

from torch.utils import cpp_extension


def build(sol, out, tag, extra):
    src_dir = tempfile.mkdtemp(prefix=f"src-{tag}-")
    for s in sol["sources"]:
        path = os.path.join(src_dir, s["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(s["content"])
    opts = sol["spec"].get("compile_options") or {}
    phases = os.path.join(out, f"nvcc-{tag}.csv")
    srcs = [os.path.join(src_dir, s["path"]) for s in sol["sources"] if s["path"].endswith((".cu", ".cpp"))]
    t0 = time.time()
    cpp_extension.load(
        name="phases_" + tag.replace("-", "_"), sources=srcs, extra_include_paths=[src_dir],
        extra_cflags=list(opts.get("cflags") or ["-O3"]) + extra,
        extra_cuda_cflags=list(opts.get("cuda_cflags") or ["-O3"]) + extra + [f"--time={phases}"],
        build_directory=tempfile.mkdtemp(prefix=f"build-{tag}-"), verbose=False)
    wall = time.time() - t0
    rows = list(csv.reader(open(phases))) if os.path.exists(phases) else []
    print(f"{tag}: load() wall {wall:.1f} s")
    for r in rows[1:]:
        print("   ", " | ".join(x.strip() for x in r))
    return wall


def main():
    problem, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    sol = json.load(open(sorted(glob.glob(os.path.join(problem, "solution_*.json")))[0]))
    for tag, extra in (("as-given", []), ("no-frontend", ["-DTORCH_INDUCTOR_CPP_WRAPPER"])):
        try:
            build(sol, out, tag, extra)
        except Exception as e:  # a diagnostic: report and go on to the next variant
            print(f"{tag}: failed: {type(e).__name__}: {str(e)[-400:]}")


if __name__ == "__main__":
    main()
