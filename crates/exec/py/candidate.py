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
import kg_wire  # noqa: E402  (first: it completes the import path)
import kg_env  # noqa: E402
import kg_handover  # noqa: E402
import kg_inputs  # noqa: E402
import kg_timing  # noqa: E402

# The harness's own modules: every attribute of each is guarded by identity (_namespace_snapshot).
HARNESS_MODULES = (kg_wire, kg_inputs, kg_env, kg_timing, kg_handover)


def _guarded_classes():
    """(name, class) of every class whose methods are guarded: the harness modules' own, the
    CUPTI recorder, the device memory pool and torch.Tensor."""
    import torch

    out = [("kgcupti.Recorder", kg_timing.kgcupti.Recorder), ("kgvmm.Pool", kg_handover.kgvmm.Pool),
           ("torch.Tensor", torch.Tensor)]
    for m in HARNESS_MODULES:
        out += [(f"{m.__name__}.{k}", v) for k, v in vars(m).items()
                if isinstance(v, type) and v.__module__ == m.__name__]
    return out


kg_wire.start_parent_watchdog()

STATE = {"fn": None, "dps": True, "device": None, "spec": None, "timed": None}


def _guarded():
    """Everything the harness relies on between handing out a timed set's key and the start of that
    call's timed span beyond the namespaces of `_namespace_snapshot`, by name: functions (with their
    code objects, which can be swapped in place), the CUPTI recorder's library and the worker's
    channel. Snapshot when the worker starts and again at `hello`, before any solution code ran."""
    import json
    import time

    import torch

    out = {
        "time.perf_counter": time.perf_counter,
        "time.perf_counter_ns": time.perf_counter_ns,
        "json.dumps": json.dumps,
        "json.loads": json.loads,
        "torch.save": torch.save,
        "torch.load": torch.load,
        "candidate._hand_over": _hand_over,
        "torch.bitwise_xor": torch.bitwise_xor,
        "torch.randint": torch.randint,
        "torch.Generator": torch.Generator,
        "candidate._guard_custom": _guard_custom,
        "torch.randn": torch.randn,
        "torch.rand": torch.rand,
        "torch.cos": torch.cos,
        "torch.sin": torch.sin,
        "kgcupti.decode": kg_timing.kgcupti.decode,
        "kgcupti.RECORDER": kg_timing.kgcupti.RECORDER,
        "kgvmm.Pool": kg_handover.kgvmm.Pool,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda._sleep": getattr(torch.cuda, "_sleep", None),
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
        "candidate._tampered": _tampered,
        "candidate._hooks": _hooks,
        # The two halves of the check guard each other.
        "candidate._namespace_changes": _namespace_changes,
        "candidate._guarded_in_class": _guarded_in_class,
    }
    # The recorder's library and callbacks (loaded at hello, before any solution code), not
    # its record lists, which every start and stop replace.
    for k in ("lib", "_req", "_done", "_lock", "_demangle", "_sizes"):
        out[f"kgcupti.RECORDER.{k}"] = getattr(kg_timing.kgcupti.RECORDER, k)
    # What a problem's own input generator calls, once the candidate has drawn with it.
    for k, (m, attr) in CUSTOM_GUARDS.items():
        out[k] = getattr(m, attr, None)
    for k, sha in CUSTOM_SOURCES.items():
        out[k] = kg_inputs.CUSTOM_MODULES.get(sha)
    if kg_wire.CHANNEL:
        out["kg_wire.CHANNEL[0]"] = kg_wire.CHANNEL[0]
        for k, v in vars(kg_wire.CHANNEL[0]).items():
            out[f"kg_wire.CHANNEL[0].{k}"] = v
    for k, v in list(out.items()):
        code = getattr(v, "__code__", None)
        if code is not None:
            out[f"{k}.__code__"] = code
    return out


def _guarded_in_class(v):
    return callable(v) or isinstance(v, (staticmethod, classmethod, property))


def _namespace_snapshot():
    """(prefix, namespace, {attribute: (value, code object or None)}, a class's attribute count or
    None) for every attribute of the harness modules (functions, classes, constants, modules,
    lists) and every method of the guarded classes; checked straight against each namespace."""
    out = []
    for m in HARNESS_MODULES:
        ns = vars(m)
        out.append((m.__name__, ns, {k: (v, getattr(v, "__code__", None)) for k, v in ns.items()
                                     if not k.startswith("__")}, None))
    for name, cls in _guarded_classes():
        ns = vars(cls)
        out.append((name, ns, {k: (v, getattr(v, "__code__", None)) for k, v in ns.items()
                               if _guarded_in_class(v)}, len(ns)))
    return out


_MISSING = object()


def _namespace_changes():
    """(replaced, added): guarded attributes whose object (or its code object) is not the one in
    the snapshot, and methods added to a guarded class since."""
    bad, added = [], []
    for prefix, ns, want, count in NAMESPACES:
        for k, (v, code) in want.items():
            if ns.get(k, _MISSING) is not v:
                bad.append(f"{prefix}.{k}")
            elif code is not None and getattr(v, "__code__", None) is not code:
                bad.append(f"{prefix}.{k}.__code__")
        # An attribute added to a class changes its count (one removed is missing above).
        if count is not None and len(ns) != count:
            added += [f"{prefix}.{k}" for k, v in list(ns.items()) if k not in want and _guarded_in_class(v)]
    return bad, added


# Custom input generators drawn with: guarded names -> (module, attribute), and the source
# hash of each generator's module (kg_inputs.CUSTOM_MODULES).
CUSTOM_GUARDS = {}
CUSTOM_SOURCES = {}


def _module_attrs():
    """The attributes of the modules a problem's input generator is likely to call, as they are
    when the worker starts (before any solution code): what custom draws are guarded against."""
    import math

    import torch

    out = {}
    for m in (torch, torch.nn, torch.nn.functional, torch.linalg, torch.special, torch.fft, math):
        out[m.__name__] = dict(vars(m))
    return out


def _guard_custom(spec):
    """Before the first draw with a problem's own input generator (a dict spec): guards every
    module attribute its code can reach (kg_inputs.code_names) as the worker's other guarded
    objects are, against their values at worker start where known, so a solution that replaced
    one (to run its code in the untimed draw before a timed call) is seen by `_tampered`."""
    if not isinstance(spec, dict):
        return
    c = spec["custom"]
    sha = hashlib.sha256(c["source"].encode()).hexdigest()
    key = f"custom:{sha[:12]}"
    if key in CUSTOM_SOURCES:
        return
    # Built here from the source, never a module the solution placed in the cache first.
    kg_inputs.CUSTOM_MODULES.pop(sha, None)
    mod = kg_inputs.custom_module(c["source"])
    fn = kg_inputs.custom_entry(c["source"], c["entrypoint"])
    CUSTOM_SOURCES[key] = sha
    GUARDED[key] = mod
    CUSTOM_GUARDS[f"{key}:entry"] = (mod, c["entrypoint"])
    GUARDED[f"{key}:entry"] = fn
    GUARDED[f"{key}:entry.__code__"] = fn.__code__
    for (mname, attr), (m, now) in kg_inputs.code_names(fn).items():
        if getattr(m, attr, None) is not now:
            continue  # made afresh on every access (a module __getattr__): no identity to guard
        name = f"{key}:{mname}.{attr}"
        start = MODULE_ATTRS_AT_START.get(mname)
        want = start.get(attr, now) if start is not None else now
        CUSTOM_GUARDS[name] = (m, attr)
        GUARDED[name] = want
        code = getattr(want, "__code__", None)
        if code is not None:
            GUARDED[f"{name}.__code__"] = code


def _hooks():
    """Execution hooks through which solution code could run inside the harness's own steps
    (between handing out key i and the start of call i's timed span, where work is not timed)."""
    import gc
    import threading

    import torch

    found = []
    if sys.getprofile() is not None:
        found.append("sys.setprofile")
    if sys.gettrace() is not None:
        found.append("sys.settrace")
    for name in ("getprofile", "gettrace"):
        get = getattr(threading, name, None)
        if get is not None and get() is not None:
            found.append(f"threading.set{name[3:]}")
    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        found += [f"sys.monitoring tool {t}" for t in range(6) if mon.get_tool(t) is not None and t not in HOOKS_AT_START]
    if len(gc.callbacks) > GC_CALLBACKS_AT_START:
        found.append("gc.callbacks")
    if torch._C._len_torch_function_stack() > 0:
        found.append("a torch function mode")
    if torch._C._len_torch_dispatch_stack() > 0:
        found.append("a torch dispatch mode")
    return found


def _tampered():
    """What the solution changed in the harness since the worker started (None if nothing):
    guarded objects replaced (or methods added to the guarded classes) and execution hooks."""
    now = _guarded()
    bad, added = _namespace_changes()
    bad += [k for k, v in GUARDED.items() if now.get(k) is not v]
    hooks = _hooks()
    parts = []
    for verb, names in (("replaced", bad), ("added", added)):
        if names:
            parts.append(f"{verb} " + ", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else ""))
    if hooks:
        parts.append("installed " + ", ".join(hooks))
    return "; ".join(parts) if parts else None


def op_hello(req):
    import torch

    dev = kg_env.resolve_device(req.get("device", "cpu"))
    kg_env.fast_torch_save()
    reply = {"result": "ok"}
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
        if req.get("cupti"):
            kg_timing.kgcupti.RECORDER.load()  # here, so the guarded snapshot below holds its library
            # CUPTI's one-time start-up (seconds) overlaps loading the solution; joined before
            # the warm-up before timing (op_time_load), so no thread of ours runs while timing.
            import threading

            t = threading.Thread(target=lambda: STATE.__setitem__("cupti_why", kg_timing.cupti_warmup(dev)),
                                 name="kg-cupti-warmup", daemon=True)
            t.start()
            STATE["cupti_warmup"] = t
    STATE["device"] = dev
    GUARDED.update(_guarded())  # now with the channel; no solution code has run yet
    NAMESPACES[:] = _namespace_snapshot()
    return reply


HIP_LANGUAGES = ("hip_cpp",)


def rocm_root(environ=None):
    """The ROCm installation a HIP build uses: `ROCM_PATH` when it is a directory, else the
    directory above the `bin` holding `hipcc` on PATH, else `/opt/rocm` (the ROCm port's order);
    None when there is none."""
    import shutil

    env = os.environ if environ is None else environ
    configured = env.get("ROCM_PATH")
    if configured and os.path.isdir(configured):
        return os.path.realpath(configured)
    hipcc = shutil.which("hipcc", path=env.get("PATH"))
    if hipcc:
        bin_dir = os.path.dirname(os.path.realpath(hipcc))
        if os.path.basename(bin_dir) == "bin":
            return os.path.dirname(bin_dir)
    return "/opt/rocm" if os.path.isdir("/opt/rocm") else None


def _hip_build_env(spec, environ):
    """What a hip_cpp build sets before torch's extension builder runs: `CXX` = the ROCm root's
    `hipcc` (unless set), and `PYTORCH_ROCM_ARCH` from the solution's `gfx*` targets (unless
    set). Returns the ROCm root, or raises RuntimeError naming what is missing."""
    root = rocm_root(environ)
    if root is None:
        raise RuntimeError("no ROCm installation for a hip_cpp build (set ROCM_PATH, or put hipcc on PATH)")
    environ.setdefault("CXX", os.path.join(root, "bin", "hipcc"))
    arches = [t for t in spec.get("target_hardware") or [] if str(t).startswith("gfx")]
    if arches and "PYTORCH_ROCM_ARCH" not in environ:
        environ["PYTORCH_ROCM_ARCH"] = ";".join(dict.fromkeys(arches))
    return root


def _rebase_rocm_flag(flag, root):
    """The ROCm port's portable `/opt/rocm` include and library flags, pointed at `root`."""
    if root is None:
        return flag
    if flag == "-I/opt/rocm/include":
        return "-I" + os.path.join(root, "include")
    if flag == "-L/opt/rocm/lib":
        return "-L" + os.path.join(root, "lib")
    return flag


def cpp_build_args(sol, root, cache_dir, environ=None):
    """The arguments of torch.utils.cpp_extension.load for a cuda_cpp or hip_cpp solution
    (sources written under `root`), cached by source hash under `cache_dir`. hip_cpp: HIP
    sources (`.hip`) too, `hip_cflags` as the device compiler's flags (torch passes
    `extra_cuda_cflags` to hipcc on ROCm), no `-lcuda`, and the build environment of
    _hip_build_env."""
    env = os.environ if environ is None else environ
    spec = sol["spec"]
    langs = [x.lower() for x in spec["languages"]]
    hip = any(x in HIP_LANGUAGES for x in langs)
    h = hashlib.sha256()
    for s in sorted(sol["sources"], key=lambda s: s["path"]):
        h.update(s["path"].encode() + b"\0" + s["content"].encode() + b"\0")
    opts = spec.get("compile_options") or {}
    h.update(repr(sorted(opts.items())).encode())
    name = "kg_ext_" + h.hexdigest()[:16]
    build_dir = os.path.join(cache_dir, name)
    suffixes = (".cu", ".cpp", ".cc", ".cxx", ".c") + ((".hip",) if hip else ())
    srcs = [os.path.join(root, s["path"]) for s in sol["sources"] if s["path"].endswith(suffixes)]
    rocm = _hip_build_env(spec, env) if hip else None
    cflags = opts.get("cflags")
    ldflags = opts.get("ld_flags")
    if hip:
        device_flags = opts.get("hip_cflags")
        device_flags = list(device_flags) if device_flags is not None else ["-O3"]
        default_ld = []
    else:
        device_flags = opts.get("cuda_cflags")
        device_flags = list(device_flags) if device_flags is not None else ["-O3", "--use_fast_math"]
        default_ld = ["-lcuda"]
    return dict(
        name=name,
        sources=srcs,
        extra_cflags=[_rebase_rocm_flag(f, rocm) for f in cflags] if cflags is not None else ["-O3"],
        extra_cuda_cflags=device_flags,
        extra_ldflags=[_rebase_rocm_flag(f, rocm) for f in ldflags] if ldflags is not None else default_ld,
        extra_include_paths=[root],
        build_directory=build_dir,
        verbose=False,
    )


def _build_cpp(sol, root, cache_dir):
    """Builds cuda_cpp/hip_cpp sources with torch.utils.cpp_extension.load (cpp_build_args)."""
    from torch.utils import cpp_extension

    args = cpp_build_args(sol, root, cache_dir)
    os.makedirs(args["build_directory"], exist_ok=True)
    return cpp_extension.load(**args)


def op_build(req):
    """kernelgate's builder (a process of its own, started like a candidate and ended after
    this): builds a compiled solution's module named `name` into `build_root/name/name.so`,
    where the parent takes it from."""
    sol = req["solution"]
    root = req["source_dir"]
    try:
        kg_env.write_sources(sol, root)
        args = cpp_build_args(sol, root, req["build_root"])
        args["name"] = req["name"]
        args["build_directory"] = os.path.join(req["build_root"], req["name"])
        os.makedirs(args["build_directory"], exist_ok=True)
        from torch.utils import cpp_extension

        cpp_extension.load(**args)
    except BaseException as e:  # SystemExit from a build script is a compile error too
        kg_wire.flush_stdio()
        return kg_wire.error_reply("compile", f"failed to build `{sol['spec']['entry_point']}`: {type(e).__name__}: {e}", traceback.format_exc())
    return {"result": "ok"}


def _load_prebuilt(path, name):
    """Imports the module kernelgate's builder made (copied into this candidate's directory by
    the parent after checking its hash), as torch's extension loader would."""
    import torch  # noqa: F401  (the module links against torch's libraries)

    spec_ = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    return mod


def op_load(req):
    sol = req["solution"]
    root = req["source_dir"]
    spec = sol["spec"]
    langs = [x.lower() for x in spec["languages"]]
    file, func = spec["entry_point"].split("::", 1)
    try:
        kg_env.write_sources(sol, root)
        if root not in sys.path:
            sys.path.insert(0, root)
        if req.get("prebuilt"):
            mod = _load_prebuilt(req["prebuilt"]["path"], req["prebuilt"]["name"])
        elif any(x in ("cuda_cpp", "cpp", "cuda") + HIP_LANGUAGES for x in langs):
            mod = _build_cpp(sol, root, req["cache_dir"])
        else:
            mod = kg_env.import_source(root, file)
    except BaseException as e:  # SystemExit from user code is a compile error too
        kg_wire.flush_stdio()
        return kg_wire.error_reply("compile", f"failed to build or import `{spec['entry_point']}`: {type(e).__name__}: {e}", traceback.format_exc())
    fn = getattr(mod, func, None)
    if not callable(fn):
        return kg_wire.error_reply("compile", f"`{file}` defines no callable `{func}`")
    STATE["fn"] = fn
    STATE["dps"] = bool(spec.get("destination_passing_style", True))
    return {"result": "ok"}


def _load_inputs(src):
    """A round's inputs: drawn from the round's seed ({"spec", "seed"}) or loaded from a file."""
    import torch

    dev = STATE["device"]
    if isinstance(src, dict):
        _guard_custom(src["spec"])
        return kg_inputs.random_input_set(src["spec"], int(src["seed"]), dev)
    vals = torch.load(src, map_location="cpu", weights_only=True)
    return [v.to(dev) if isinstance(v, torch.Tensor) else v for v in vals]


def _alloc_outputs(outputs):
    return kg_handover.alloc_like_spec(outputs, STATE["device"])


def _invoke(inputs, outs):
    if STATE["dps"]:
        STATE["fn"](*inputs, *outs)
        return outs
    return _normalize(STATE["fn"](*inputs))


def _normalize(res):
    """A value-returning solution's result as a list of outputs."""
    if isinstance(res, dict):
        return [res.get(o) for o in STATE["output_names"]]
    if isinstance(res, (tuple, list)):
        return list(res)
    return [res]


REWARD_HACK_TAG = "kg:reward_hack:"


def _storages(vals):
    import torch

    out = set()
    for v in vals:
        if isinstance(v, torch.Tensor):
            try:
                out.add(v.untyped_storage().data_ptr())
            except Exception:
                pass
    return out


def _reward_hack(outs, inputs):
    """(reason, message) if the outputs are not plain torch.Tensors or share storage with an
    input (the reason is a trace `reason` code), else None."""
    import torch

    if not isinstance(outs, list):
        return None
    ins = _storages(inputs)
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
            return ("output_subclass",
                    f"output {i} is a {type(o).__module__}.{type(o).__qualname__}, a torch.Tensor subclass (only plain torch.Tensor outputs are accepted)")
        if type(o) is torch.Tensor and o.numel() > 0 and _storages([o]) & ins:
            return ("output_aliases_input", f"output {i} shares storage with an input (outputs must not alias inputs)")
    return None


def _clean_outputs(outs):
    """What the judge gets of a call's outputs: a snapshot of each plain tensor on its device
    (kg_handover.write_outputs copies a batch's to the host at once; a solution that returns one
    buffer every call must not rewrite an earlier round's), else a string saying what it was."""
    import torch

    clean = []
    for o in outs:
        if type(o) is torch.Tensor:
            clean.append(o.detach().clone())
        elif isinstance(o, torch.Tensor):  # subclasses (lazy tensors): flagged for the judge
            clean.append(REWARD_HACK_TAG + repr(type(o)))
        elif isinstance(o, (int, float, bool)):
            clean.append(torch.tensor(o))
        else:
            clean.append(repr(type(o)))
    return clean


def _sync():
    import torch

    if STATE["device"].type == "cuda":
        torch.cuda.synchronize()


def _run_round(req):
    """One correctness round: (reply, outputs moved to the host) or (error reply, None)."""
    import time

    ms = {}
    t0 = time.perf_counter()
    STATE["output_names"] = [o["name"] for o in req["outputs"]]
    try:
        inputs = _load_inputs(req["in"])
    except Exception as e:
        if isinstance(req["in"], dict) and req.get("digest"):
            # Round 0 of drawn inputs, where the parent compares what was drawn: a problem's
            # generator that cannot run here (it imports a file of the problem's) means files.
            return {"result": "ok", "draw_failed": f"{type(e).__name__}: {e}"}, None
        raise
    # What was drawn, before the solution runs (it may legitimately write into its inputs).
    drawn = [x.clone() if hasattr(x, "clone") else x for x in inputs] if req.get("digest") else None
    outs = _alloc_outputs(req["outputs"]) if STATE["dps"] else None
    if outs is not None:
        kg_handover.poison_outputs(outs)
    _sync()
    t1 = time.perf_counter()
    ms["inputs"] = (t1 - t0) * 1e3
    try:
        res = _invoke(inputs, outs)
        _sync()
    except BaseException as e:
        kg_wire.flush_stdio()
        return kg_wire.error_reply("runtime", f"the solution raised: {type(e).__name__}: {e}", traceback.format_exc()), None
    t2 = time.perf_counter()
    ms["call"] = (t2 - t1) * 1e3
    hack = _reward_hack(res, inputs)
    clean = _clean_outputs(res)
    kg_wire.flush_stdio()
    t3 = time.perf_counter()
    ms["save"] = (t3 - t2) * 1e3
    if hack:
        return {"result": "ok", "reward_hack": hack[1], "reward_hack_reason": hack[0]}, None
    # Where a round's time goes (diagnostic only: the parent logs it, never decides on it).
    reply = {"result": "ok", "ms": ms}
    if req.get("digest"):
        reply["digest"] = kg_inputs.digest(drawn)
        ms["digest"] = (time.perf_counter() - t3) * 1e3
    return reply, clean


def op_run_rounds(req):
    """Runs several correctness rounds (`runs`: one request each, in order) and writes every
    round's outputs, one group each, to the file `out` (kg_handover.write_outputs). `replies`
    holds one reply per round; a round that raised ends the request with its error, one
    flagged as a reward hack ends it with nothing written."""
    import time

    replies = []
    outs = []
    STATE.pop("handed", None)
    for run in req["runs"]:
        reply, clean = _run_round(run)
        if "draw_failed" in reply:
            return {"result": "ok", "draw_failed": reply["draw_failed"], "replies": []}
        if reply.get("result") != "ok":
            reply["message"] = f"round {run.get('round')}: {reply.get('message', '')}"
            return reply
        replies.append(reply)
        if clean is None:
            return {"result": "ok", "replies": replies}
        outs.append(clean)
    t0 = time.perf_counter()
    handed = _hand_over(outs, req)
    return {"result": "ok", "replies": replies, "ms": {"save": (time.perf_counter() - t0) * 1e3}, **handed}


def _hand_over(groups, req):
    """Hands `groups` to the judge: on the device when the parent asks (`device_out`) and this
    process's output pool works (the reply's `device` describes them), else in the file `out`.
    The groups are kept for `resend`."""
    STATE["handed"] = groups
    dev = STATE["device"]
    if req.get("device_out") and dev.type == "cuda" and "pool_off" not in STATE:
        try:
            return {"device": kg_handover.device_outputs(groups, dev, kg_wire.CHANNEL[0])}
        except (kg_handover.kgvmm.VmmError, OSError) as e:
            STATE["pool_off"] = f"{type(e).__name__}: {e}"
    kg_handover.write_outputs(req["out"], groups, dev)
    return {"pool_off": STATE["pool_off"]} if "pool_off" in STATE else {}


def op_resend(req):
    """Writes the last outputs handed over on the device to the file `out` (the judge could not
    read the pool); every later hand-over goes as a file."""
    if "handed" not in STATE:
        return kg_wire.error_reply("protocol", "`resend` before any outputs were handed over")
    STATE["pool_off"] = req.get("why") or "the judge could not read the pool"
    kg_handover.write_outputs(req["out"], STATE.pop("handed"), STATE["device"])
    return {"result": "ok"}


def _load_sets(path):
    import torch

    dev = STATE["device"]
    sets = torch.load(path, map_location="cpu", weights_only=True)
    return [[v.to(dev) if isinstance(v, torch.Tensor) else v for v in vals] for vals in sets]


def op_time_load(req):
    """Warms up on the last correctness round's inputs (while the judge checks the last batch
    and prepares the timed sets: op_time_sets comes next), so nothing the warm-up sees is ever
    timed."""
    w = STATE.pop("cupti_warmup", None)
    if w is not None:
        w.join()
    STATE["output_names"] = [o["name"] for o in req["outputs"]]
    STATE["timed"] = None
    warm_in = _load_inputs(req["in"])
    warm_out = _alloc_outputs(req["outputs"]) if STATE["dps"] else None
    try:
        warm_ms = kg_timing.warm_up(lambda: _invoke(warm_in, warm_out), STATE["device"], int(req["warmup"]), req.get("budget_s"))
    except BaseException as e:
        kg_wire.flush_stdio()
        return kg_wire.error_reply("runtime", f"the solution raised while warming up: {type(e).__name__}: {e}", traceback.format_exc())
    kg_wire.flush_stdio()
    return {"result": "ok", "warmup_ms": warm_ms}


def op_time_sets(req):
    """Sets up the timed input sets (distinct values, one per timed iteration): drawn as each
    call starts from the seed the parent hands out then (`generate`), or sealed by the judge
    in the file `timed_in`."""
    gen = req.get("generate")
    probe = None
    if gen:
        # No bytes handed over: set i is drawn from the seed the parent hands out as call i
        # starts. The probe (a seed of no timed set) shows the judge that both sides draw alike.
        sets = [None] * int(gen["count"])
        try:
            _guard_custom(gen["spec"])
            probe = kg_inputs.digest(kg_inputs.random_input_set(gen["spec"], int(gen["probe_seed"]), STATE["device"]))
        except Exception as e:  # the problem's generator cannot run here: the parent sends files
            probe = f"draw failed: {type(e).__name__}: {e}"
    else:
        sets = _load_sets(req["timed_in"])
    # One preallocated stash per set that each timed call's outputs are copied into afterwards
    # (kg_handover.stash_outputs), outside the timed span. DPS calls all write into one output
    # list, as a value-returning call (and the reference) gets its output memory back from the
    # allocator each call: writing into a cold buffer per call made a DPS solution up to 2x
    # slower on the CPU than the same work value-returning. A call that writes nothing leaves
    # the previous set's outputs there, which the sampled re-check finds wrong.
    shared = _alloc_outputs(req["outputs"]) if STATE["dps"] else None
    STATE["timed"] = {
        "sets": [(ins, shared) for ins in sets],
        "outs": [None] * len(sets),
        "stash": [_alloc_outputs(req["outputs"]) for _ in sets],
        "generate": (gen["spec"], STATE["device"], len(sets)) if gen else None,
    }
    reply = {"result": "ok", "count": len(sets)}
    if probe is not None:
        reply["probe_digest"] = probe
    return reply


def op_time(req):
    """Times one call per timed input set (never the same values twice); keeps each output."""
    import threading

    t = STATE["timed"]
    if t is None:
        return kg_wire.error_reply("protocol", "`time` before `time_sets`")
    tampered = _tampered()
    if tampered:
        return {"result": "ok", "reward_hack": f"the solution tampered with the harness before timing: {tampered}",
                "reward_hack_reason": "harness_tampered"}
    sets = t["sets"]
    base_threads = threading.active_count()
    seen = {"threads": base_threads}

    fn = STATE["fn"]
    store = t["outs"]
    # The timed call does no more than the reference's (one call, one store): normalising the
    # result, the thread count and the output checks happen in `after`, outside the timed span.
    if STATE["dps"]:
        def call(a):
            fn(*a[0], *a[1])
            store[a[2]] = a[1]
    else:
        def call(a):
            store[a[2]] = fn(*a[0])

    def after(a, _):
        i = a[2]
        n = threading.active_count()
        if n > seen["threads"]:
            seen["threads"] = n
        o = store[i] if STATE["dps"] else _normalize(store[i])
        store[i] = o
        if "hack" not in seen:
            hack = _reward_hack(o, a[0])
            if hack:
                seen["hack"] = (hack[0], f"timed call {i}: {hack[1]}")
        if t["stash"] is not None and isinstance(o, list):
            store[i] = kg_handover.stash_outputs(o, t["stash"][i])
        # Last, so nothing of the solution's runs between this check and opening the next set.
        if "tamper" not in seen:
            bad = _tampered()
            if bad:
                seen["tamper"] = f"{bad} (seen after timed call {i})"

    args = kg_inputs.SealedSets([ins for ins, _ in sets], extras=[(outs,) for _, outs in sets], generate=t["generate"])
    iters = min(int(req["iterations"]), len(args))
    try:
        timer = kg_timing.timer_for(req["method"], STATE["device"], 0, iters, req.get("budget_s"), req.get("spin_us"))
        times, notes = kg_timing.time_calls(kg_timing.Calls(call, args, after), timer)
        _sync()
        if req["method"] == "cuda_graph":
            # Graph replay times set 0 only and runs no `after`: check its output once here.
            after(args[0], None)
        seen["threads"] = max(seen["threads"], threading.active_count())
    except BaseException as e:
        kg_wire.flush_stdio()
        return kg_wire.error_reply("runtime", f"the solution raised while timed: {type(e).__name__}: {e}", traceback.format_exc())
    kg_wire.flush_stdio()
    reply = {"result": "ok", "times_ms": times, "notes": notes}
    tampered = seen.get("tamper") or _tampered()
    if tampered:
        reply["reward_hack"] = f"the solution tampered with the harness while timed: {tampered}"
        reply["reward_hack_reason"] = "harness_tampered"
    elif seen["threads"] > base_threads:
        reply["reward_hack"] = (
            f"the solution started threads during timed calls ({base_threads} Python threads before, "
            f"{seen['threads']} during): work moved off the timed path")
        reply["reward_hack_reason"] = "timed_threads"
    elif "hack" in seen:
        reply["reward_hack_reason"], reply["reward_hack"] = seen["hack"]
    return reply


def op_time_save(req):
    """Saves the outputs of the timed calls the judge sampled (told only after timing)."""
    STATE.pop("handed", None)
    t = STATE["timed"]
    if t is None:
        return kg_wire.error_reply("protocol", "`time_save` before `time`")
    picked = []
    for i in req["indices"]:
        o = t["outs"][int(i)] if 0 <= int(i) < len(t["outs"]) else None
        picked.append(_clean_outputs(o) if o is not None else "missing")
    tampered = _tampered()
    STATE["timed"] = None
    handed = _hand_over(picked, req)
    if tampered:
        return {"result": "ok", "reward_hack": f"the solution tampered with the harness: {tampered}",
                "reward_hack_reason": "harness_tampered"}
    return {"result": "ok", **handed}


if __name__ == "__main__":
    import faulthandler
    import gc

    kg_env.warm(os.environ.get("KG_WARM"))

    HOOKS_AT_START = {t for t in range(6) if getattr(sys, "monitoring", None) and sys.monitoring.get_tool(t) is not None}
    GC_CALLBACKS_AT_START = len(gc.callbacks)
    MODULE_ATTRS_AT_START = _module_attrs()
    GUARDED = _guarded()
    NAMESPACES = _namespace_snapshot()

    faulthandler.enable()
    kg_wire.serve({
        "hello": op_hello, "load": op_load, "run_rounds": op_run_rounds,
        "time_load": op_time_load, "time_sets": op_time_sets, "time": op_time, "time_save": op_time_save,
        "resend": op_resend, "build": op_build,
    })
