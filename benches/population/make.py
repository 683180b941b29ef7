"""Writes a population of Triton GELU (tanh) candidates for problems/core's
gelu_tanh_bf16_gemma2_2b, as an LLM kernel-optimisation loop would produce them: block sizes,
warps and stages varied, some wrong (a tail mask that drops the last partial block, a wrong
constant), some slow (tiny blocks, one warp). Deterministic: the same N gives the same files.

    python3 benches/population/make.py OUT_DIR [N]

writes OUT_DIR/gelu_tanh_bf16_gemma2_2b/<name>.json (kg-bench run --solutions OUT_DIR) and
OUT_DIR/expected.json (name -> "ok" | "wrong" | "slow")."""

import itertools
import json
import os
import random
import sys

DEFINITION = "gelu_tanh_bf16_gemma2_2b"

KERNEL = '''"""GELU (tanh approximation) in Triton, population variant {name}."""
import torch
import triton
import triton.language as tl


@triton.jit
def _gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = {mask}
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + {cubic} * x * x * x)
    t = 1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)
    y = 0.5 * x * (1.0 + t)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def run(x, y):
    x = x.contiguous()
    n = x.numel()
    _gelu[(triton.cdiv(n, {block}),)](x, y, n, BLOCK={block}, num_warps={warps}, num_stages={stages})
'''

GOOD_MASK = "offs < n"
# Drops the last partial block: right on sizes that are a multiple of BLOCK only.
TAIL_BUG = "offs < (n // BLOCK) * BLOCK"


def population(n):
    rng = random.Random(20261205)
    grid = list(itertools.product([512, 1024, 2048, 4096, 8192, 16384], [2, 4, 8], [1, 2, 3]))
    rng.shuffle(grid)
    out = []
    for k in range(n):
        kind = "ok"
        block, warps, stages = grid[k % len(grid)]
        mask, cubic = GOOD_MASK, "0.044715"
        if k % 10 == 3:
            kind, mask = "wrong", TAIL_BUG
        elif k % 10 == 7:
            kind, cubic = "wrong", "0.44715"
        elif k % 10 == 9:
            kind, block, warps, stages = "slow", 64, 1, 1
        name = f"pop{k:03d}_b{block}_w{warps}_s{stages}_{kind}"
        out.append((name, kind, KERNEL.format(name=name, mask=mask, cubic=cubic, block=block,
                                                warps=warps, stages=stages)))
    return out


def main():
    out_dir = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    d = os.path.join(out_dir, DEFINITION)
    os.makedirs(d, exist_ok=True)
    expected = {}
    for name, kind, src in population(n):
        sol = {
            "name": name, "definition": DEFINITION, "author": "kernelgate-population",
            "spec": {"languages": ["triton"], "target_hardware": ["LOCAL"],
                     "entry_point": "kernel.py::run", "destination_passing_style": True,
                     "dependencies": ["torch", "triton"]},
            "sources": [{"path": "kernel.py", "content": src}],
        }
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(sol, f, indent=1)
        expected[name] = kind
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"{n} candidates in {d}")


if __name__ == "__main__":
    main()
