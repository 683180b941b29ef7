"""Writes reach_gpu.json and honest.json (a copy of the GELU solution SRC) into OUT: reach_gpu
is the same GELU, plus a module prelude that, where torch sees no GPU (in the precompiler),
asks the CUDA driver itself (cuInit, cuDeviceGetCount) with every device made visible, and
writes what it found into its own Triton cache; its candidate prints that, and returns zeros
if the GPU was reached (so the run fails). Usage: precompile_reach.py SRC OUT"""
import json, sys

PRELUDE = r'''
import ctypes as _ct, os as _os, subprocess as _sp, sys as _sys
_MARK = _os.path.join(_os.environ.get("TRITON_CACHE_DIR", "/nonexistent"), "kg-redteam-reach")
_PROBE = ("import ctypes; l = ctypes.CDLL('libcuda.so.1'); n = ctypes.c_int(-1); "
          "r = l.cuInit(0); print(r, l.cuDeviceGetCount(ctypes.byref(n)) if r == 0 else -1, n.value)")

def _ask_the_driver():
    env = {**_os.environ, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    for k in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        env.pop(k, None)
    try:
        out = _sp.run([_sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60)
        return (out.stdout.strip() or out.stderr.strip()[-200:]).replace("\n", " ")
    except Exception as e:
        return f"{type(e).__name__}: {e}"

import torch as _torch
if not _torch.cuda.is_available():
    _found = _ask_the_driver()
    _reached = _found.split()[:1] == ["0"]
    with open(_MARK, "w") as _f:
        _f.write(("REACHED " if _reached else "refused ") + _found)
_STATE = open(_MARK).read() if _os.path.exists(_MARK) else "absent"
print(f"kg-redteam-precompiler: {_STATE}", flush=True)
'''

src, out = sys.argv[1], sys.argv[2]
sol = json.load(open(src))
with open(f"{out}/honest.json", "w") as f:
    json.dump({**sol, "name": "honest"}, f, indent=1)
body = sol["sources"][0]["content"]
body = body.replace("def run(", "def _honest_run(")
body += PRELUDE + '''

def run(x, y):
    if _STATE.startswith("REACHED"):
        y.zero_()
        return
    _honest_run(x, y)
'''
sol = {**sol, "name": "reach_gpu", "sources": [{**sol["sources"][0], "content": body}]}
with open(f"{out}/reach_gpu.json", "w") as f:
    json.dump(sol, f, indent=1)
