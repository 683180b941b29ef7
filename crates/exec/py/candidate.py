"""kernelgate candidate worker (runs untrusted solution code; embedded in kg-exec).

One process per solution. Writes the solution's sources into its own directory, imports the
entry point (building C++/CUDA sources with torch's extension builder), runs it on input files
the judge wrote, times it, and writes its outputs to files the judge reads. It never sees the
seed or the reference outputs.
"""

import hashlib
import importlib.util
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kgcommon as kg  # noqa: E402

kg.start_parent_watchdog()

STATE = {"fn": None, "dps": True, "device": None, "spec": None}


def op_hello(req):
    import torch

    dev = kg.resolve_device(req.get("device", "cpu"))
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
    STATE["device"] = dev
    return {"result": "ok"}


def _write_sources(sol, root):
    for s in sol["sources"]:
        p = os.path.normpath(os.path.join(root, s["path"]))
        if not p.startswith(os.path.abspath(root) + os.sep):
            raise ValueError(f"source path `{s['path']}` escapes the solution directory")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(s["content"])


def _build_cpp(sol, root, cache_dir):
    """Builds cuda_cpp/cpp sources with torch.utils.cpp_extension.load, cached by source hash."""
    from torch.utils import cpp_extension

    h = hashlib.sha256()
    for s in sorted(sol["sources"], key=lambda s: s["path"]):
        h.update(s["path"].encode() + b"\0" + s["content"].encode() + b"\0")
    opts = sol["spec"].get("compile_options") or {}
    h.update(repr(sorted(opts.items())).encode())
    digest = h.hexdigest()[:16]
    name = "kg_ext_" + digest
    build_dir = os.path.join(cache_dir, name)
    os.makedirs(build_dir, exist_ok=True)
    srcs = [os.path.join(root, s["path"]) for s in sol["sources"]
            if s["path"].endswith((".cu", ".cpp", ".cc", ".cxx", ".c"))]
    cflags = opts.get("cflags")
    cuda_cflags = opts.get("cuda_cflags")
    ldflags = opts.get("ld_flags")
    mod = cpp_extension.load(
        name=name,
        sources=srcs,
        extra_cflags=list(cflags) if cflags is not None else ["-O3"],
        extra_cuda_cflags=list(cuda_cflags) if cuda_cflags is not None else ["-O3", "--use_fast_math"],
        extra_ldflags=list(ldflags) if ldflags is not None else ["-lcuda"],
        extra_include_paths=[root],
        build_directory=build_dir,
        verbose=False,
    )
    return mod


def op_load(req):
    sol = req["solution"]
    root = req["source_dir"]
    spec = sol["spec"]
    langs = [x.lower() for x in spec["languages"]]
    file, func = spec["entry_point"].split("::", 1)
    try:
        _write_sources(sol, root)
        if root not in sys.path:
            sys.path.insert(0, root)
        if any(x in ("cuda_cpp", "cpp", "cuda") for x in langs):
            mod = _build_cpp(sol, root, req["cache_dir"])
        else:
            path = os.path.join(root, file)
            modname = os.path.splitext(os.path.basename(file))[0]
            spec_ = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec_)
            sys.modules[modname] = mod
            spec_.loader.exec_module(mod)
    except BaseException as e:  # SystemExit from user code is a compile error too
        kg.flush_stdio()
        return kg.error_reply("compile", f"failed to build or import `{spec['entry_point']}`: {type(e).__name__}: {e}", traceback.format_exc())
    fn = getattr(mod, func, None)
    if not callable(fn):
        return kg.error_reply("compile", f"`{file}` defines no callable `{func}`")
    STATE["fn"] = fn
    STATE["dps"] = bool(spec.get("destination_passing_style", True))
    return {"result": "ok"}


def _load_inputs(path):
    import torch

    dev = STATE["device"]
    vals = torch.load(path, map_location="cpu", weights_only=True)
    return [v.to(dev) if isinstance(v, torch.Tensor) else v for v in vals]


def _alloc_outputs(outputs):
    import torch

    return [torch.empty(o["shape"] if o["shape"] is not None else [], dtype=kg.torch_dtype(o["dtype"]), device=STATE["device"])
            for o in outputs]


def _invoke(inputs, outs):
    if STATE["dps"]:
        STATE["fn"](*inputs, *outs)
        return outs
    res = STATE["fn"](*inputs)
    if isinstance(res, dict):
        return [res.get(o) for o in STATE["output_names"]]
    if isinstance(res, (tuple, list)):
        return list(res)
    return [res]


def _save_outputs(outs, path):
    import torch

    clean = []
    for o in outs:
        if type(o) is torch.Tensor:
            clean.append(o.detach().to("cpu"))
        elif isinstance(o, torch.Tensor):  # subclasses (lazy tensors) are rejected by the judge
            clean.append(repr(type(o)))
        elif isinstance(o, (int, float, bool)):
            clean.append(torch.tensor(o))
        else:
            clean.append(repr(type(o)))
    torch.save(clean, path)


def _sync():
    import torch

    if STATE["device"].type == "cuda":
        torch.cuda.synchronize()


def op_run(req):
    STATE["output_names"] = [o["name"] for o in req["outputs"]]
    inputs = _load_inputs(req["in"])
    outs = _alloc_outputs(req["outputs"]) if STATE["dps"] else None
    try:
        res = _invoke(inputs, outs)
        _sync()
    except BaseException as e:
        kg.flush_stdio()
        return kg.error_reply("runtime", f"the solution raised: {type(e).__name__}: {e}", traceback.format_exc())
    _save_outputs(res, req["out"])
    kg.flush_stdio()
    return {"result": "ok"}


def op_time(req):
    import torch

    STATE["output_names"] = [o["name"] for o in req["outputs"]]
    inputs = _load_inputs(req["in"])
    k = max(1, int(req.get("clones", 1)))
    sets = []
    for _ in range(k):
        ins = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        outs = _alloc_outputs(req["outputs"]) if STATE["dps"] else None
        sets.append((ins, outs))
    last = {}

    def call(a):
        last["out"] = _invoke(a[0], a[1])

    try:
        times, notes = kg.time_calls(call, sets, STATE["device"], int(req["warmup"]), int(req["iterations"]), req["method"], req.get("budget_s"))
        _sync()
    except BaseException as e:
        kg.flush_stdio()
        return kg.error_reply("runtime", f"the solution raised while timed: {type(e).__name__}: {e}", traceback.format_exc())
    if "out" in last:
        _save_outputs(last["out"], req["out"])
    kg.flush_stdio()
    return {"result": "ok", "times_ms": times, "notes": notes, "spread": kg.summarize(times)}


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()
    kg.serve({"hello": op_hello, "load": op_load, "run": op_run, "time": op_time})
