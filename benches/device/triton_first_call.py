"""Where a Triton candidate's first call goes (issue 24): each case is a fresh process with its
own TRITON_CACHE_DIR, as a kernelgate candidate has. `fresh`: an empty cache; `utils`: a cache
holding what an earlier process compiled for *another* kernel (Triton's driver utilities and
launchers, not the kernel itself); `cuda_utils`: the driver utilities alone. The differences
are what a shared, read-only layer of those files would save each candidate.

    python3 triton_first_call.py OUT_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r'''
import sys, time
t0 = time.perf_counter()
import torch, triton, triton.language as tl
t1 = time.perf_counter()

@triton.jit
def gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    off = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = off < n
    x = tl.load(x_ptr + off, mask=m).to(tl.float32)
    y = 0.5 * x * (1 + tl.math.erf(x * 0.7071067811865476))
    tl.store(y_ptr + off, y.to(tl.bfloat16), mask=m)

block = int(sys.argv[1])
x = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
torch.cuda.synchronize()
t2 = time.perf_counter()
gelu[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block, num_warps=4)
torch.cuda.synchronize()
t3 = time.perf_counter()
gelu[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block, num_warps=4)
torch.cuda.synchronize()
t4 = time.perf_counter()
print(f"import {t1 - t0:.3f} s; first call {t3 - t2:.3f} s; second {1e3 * (t4 - t3):.2f} ms")
'''


def run(tag, block, cache):
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    # Triton reads a kernel's source from its file.
    script = os.path.join(tempfile.mkdtemp(prefix="tfc-src-"), "child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    r = subprocess.run([sys.executable, script, str(block)], env=env, capture_output=True, text=True)
    print(f"{tag:>12} BLOCK={block:<5} {r.stdout.strip()} {r.stderr.strip()[-300:] if r.returncode else ''}")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = tempfile.mkdtemp(prefix="tfc-base-")
    run("fresh", 1024, base)
    listing = []
    for d, _, files in os.walk(base):
        for f in files:
            listing.append(os.path.relpath(os.path.join(d, f), base))
    open(os.path.join(out, "cache-listing.txt"), "w").write("\n".join(sorted(listing)) + "\n")
    print("cache after one kernel:", ", ".join(sorted({os.path.basename(f) for f in listing})))
    for block in (2048, 4096, 512):
        run("fresh", block, tempfile.mkdtemp(prefix="tfc-"))
        layer = tempfile.mkdtemp(prefix="tfc-")
        shutil.rmtree(layer)
        # Everything but the kernel's own entries (those holding a `gelu.*` file).
        shutil.copytree(base, layer, ignore=lambda d, fs: fs if any(f.startswith("gelu.") for f in fs) else [])
        run("utils", block, layer)
        only = tempfile.mkdtemp(prefix="tfc-")
        shutil.rmtree(only)
        # Triton's driver utilities alone (compiled once per Triton, not per kernel).
        shutil.copytree(base, only, ignore=lambda d, fs: [] if d == base or any(f.startswith("cuda_utils") for f in fs) else fs)
        run("cuda_utils", block, only)


if __name__ == "__main__":
    main()
