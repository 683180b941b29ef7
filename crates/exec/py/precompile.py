"""The precompiler (embedded in kg-exec): compiles the Triton kernels of a solution's first calls
into the solution's own Triton cache while another candidate is evaluated, so that its own
candidate process finds them there. Untrusted: it runs the solution's code, with the trust of
the candidate of the same solution and nothing more, and no GPU (kg-exec hides the device nodes
and the visibility variables say none). Its calls take meta tensors (shapes and dtypes, no data:
torch's own operations in the solution cost nothing) of each workload's shapes, and a stand-in
for Triton's CUDA driver names the evaluation's GPU target, so every Triton launch becomes a
compile (`warmup`) and no kernel runs; each compiled kernel's launcher
(a C module) is built too. All it leaves are cache files that candidate would have written in
its first calls; nothing it computes is read back, and a failing call only means less was
compiled ahead.

The job (`KG_PRECOMPILE_JOB`, a JSON file) is done before the worker says it is ready; `result`
then answers what was compiled."""

import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kg_wire  # noqa: E402  (first: it completes the import path)

RESULT = {}


def _stand_in_driver(arch, warp_size):
    """Triton's CUDA driver answering for GPU `arch` (e.g. 90) with no device present."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver, CudaLauncher

    class StandIn(CudaDriver):
        def __init__(self):  # no CudaUtils: it would load the CUDA driver library
            self.utils = None
            self.launcher_cls = CudaLauncher

        def get_current_target(self):
            return GPUTarget("cuda", arch, warp_size)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        @staticmethod
        def is_active():
            return True

    return StandIn()


def _compile_only(compiled):
    """Every JIT launch compiles instead (and the kernel is kept in `compiled`); an autotuned
    kernel compiles each of its configurations instead of timing them."""
    from triton.runtime import autotuner, jit

    run = jit.JITFunction.run

    def compile_run(self, *args, grid, warmup, **kwargs):
        k = run(self, *args, grid=grid, warmup=True, **kwargs)
        if k is not None:
            compiled.append(k)
        return k

    def tune_run(self, *args, **kwargs):
        kwargs.pop("warmup", None)
        return self.warmup(*args, **kwargs)

    jit.JITFunction.run = compile_run
    autotuner.Autotuner.run = tune_run


def _value(spec):
    import torch

    import kg_inputs

    if "scalar" in spec:
        return spec["scalar"]
    # Triton specialises a meta tensor's pointer (0) as 16-byte aligned, as a GPU allocation.
    return torch.empty(spec["shape"], dtype=kg_inputs.torch_dtype(spec["dtype"]), device="meta")


def _load(sol, root):
    import kg_env

    file, func = sol["spec"]["entry_point"].split("::", 1)
    kg_env.write_sources(sol, root)
    sys.path.insert(0, root)
    return getattr(kg_env.import_source(root, file), func)


class NotCovered(Exception):
    """A GPU device node the parent covered is not `/dev/null` here: no solution code runs."""


def _check_covered(paths):
    null = os.stat("/dev/null").st_rdev
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        if st.st_rdev != null:
            raise NotCovered(f"`{p}` is not /dev/null in this view: the GPU may be reachable")


def precompile(job):
    """Does `job` ({solution, source_dir, arch, warp_size, dps, calls: [{inputs, outputs}],
    covered: the GPU device nodes that must read as /dev/null}) and says what it compiled:
    kernels, launchers built, calls that raised (first message)."""
    _check_covered(job.get("covered", []))
    t0 = time.perf_counter()
    compiled, failed = [], []
    from triton.runtime import driver

    driver.set_active(_stand_in_driver(int(job["arch"]), int(job.get("warp_size", 32))))
    _compile_only(compiled)
    fn = _load(job["solution"], job["source_dir"])
    for call in job["calls"]:
        try:
            inputs = [_value(v) for v in call["inputs"]]
            if job.get("dps", True):
                fn(*inputs, *[_value(o) for o in call["outputs"]])
            else:
                fn(*inputs)
        except Exception as e:  # noqa: BLE001  (a call that fails here is only compiled later)
            failed.append(f"{type(e).__name__}: {e}")
    from triton.backends.nvidia.driver import CudaLauncher

    launchers, seen = 0, set()
    for k in compiled:
        if k.hash in seen:
            continue
        seen.add(k.hash)
        try:
            CudaLauncher(k.src, k.metadata)
            launchers += 1
        except Exception as e:  # noqa: BLE001  (the candidate builds it in its first call)
            failed.append(f"launcher of {k.name}: {type(e).__name__}: {e}")
    return {"kernels": len(seen), "launchers": launchers, "failed": failed[:4],
            "failed_count": len(failed), "seconds": time.perf_counter() - t0}


def op_result(_req):
    return {"result": "ok", **RESULT}


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)  # compiled here, whatever the environment says
    try:
        with open(os.environ["KG_PRECOMPILE_JOB"]) as f:
            RESULT.update(precompile(json.load(f)))
    except NotCovered as e:
        RESULT.update({"kernels": 0, "launchers": 0, "failed": [str(e)], "failed_count": 1, "refused": str(e)})
    except BaseException as e:  # noqa: BLE001  (SystemExit from solution code too)
        RESULT.update({"kernels": 0, "launchers": 0, "failed": [f"{type(e).__name__}: {e}"],
                       "failed_count": 1, "trace": traceback.format_exc()[-2000:]})
    kg_wire.flush_stdio()
    kg_wire.serve({"result": op_result})
