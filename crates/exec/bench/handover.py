"""How fast outputs cross from the candidate to the judge, by where the file lies and how it is
written (issue 4, criterion (c): fp8 dequant N=576 K=7168 hands over 83 MB a batch).

Run on a GPU: python3 crates/exec/bench/handover.py > handover.jsonl
For each directory (the system temp dir and /dev/shm where present) and size, REPEATS times,
fresh files: kg_handover.write_outputs (device -> the file's mapped pages), the same bytes copied
device -> a kept pinned buffer -> write(), and kg_handover.read_outputs (file -> the kept pinned
buffer -> device). One JSON line per measurement, in ms; first a line naming the filesystems.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "py"))
REPEATS = 3
SIZES_MB = (8, 83)


def ms(t0):
    return round((time.perf_counter() - t0) * 1e3, 3)


def main():
    import torch

    import kg_wire
    import kg_handover

    dev = torch.device("cuda:0")
    dirs = [tempfile.gettempdir()] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
    fs = subprocess.run(["df", "-T", *dirs], capture_output=True, text=True).stdout
    print(json.dumps({"filesystems": fs}), flush=True)
    t0 = time.perf_counter()
    stage = torch.empty(128 << 20, dtype=torch.uint8, pin_memory=True)
    print(json.dumps({"pin_128MiB_ms": ms(t0)}), flush=True)
    kg_handover.output_stage(128 << 20, dev)  # the judge's kept buffer, made once as at `hello`
    for base in dirs:
        for mb in SIZES_MB:
            out = torch.randn(mb << 19, device=dev).to(torch.bfloat16)  # mb MB of bf16
            torch.cuda.synchronize()
            for rep in range(REPEATS):
                d = tempfile.mkdtemp(prefix="kg-handover-", dir=base)
                try:
                    p = os.path.join(d, "out.bin")
                    t0 = time.perf_counter()
                    kg_handover.write_outputs(p, [[out]], dev)
                    w = ms(t0)
                    t0 = time.perf_counter()
                    got = kg_handover.read_outputs(p, dev)
                    torch.cuda.synchronize()
                    r = ms(t0)
                    ok = bool(torch.equal(got[0][0], out))
                    n = out.numel() * out.element_size()
                    t0 = time.perf_counter()
                    stage[:n].copy_(out.view(-1).view(torch.uint8))
                    c = ms(t0)
                    with open(os.path.join(d, "staged.bin"), "wb") as f:
                        f.write(memoryview(stage[:n].numpy()))
                    s = ms(t0)
                    print(json.dumps({"dir": base, "mb": mb, "rep": rep, "write_outputs_ms": w, "read_outputs_ms": r,
                                      "equal": ok, "pinned_copy_ms": c, "pinned_copy_and_write_ms": s}), flush=True)
                finally:
                    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
