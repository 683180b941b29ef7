"""kernelgate SOLAR operator-graph extraction (embedded in kg-solar, run with `python -I -B`).

Reads one JSON request on stdin: {"analyses": [{"id", "backend": "aten"|"fx", "reference",
"reference_path", "custom_inputs_entrypoint", "axes", "inputs": [{"name", "shape", "dtype",
"kind", "value"}], "outputs": [names]}]} and writes one tagged JSON reply to the file named by
argv[1] (never stdout: a reference may print). Each analysis traces the reference's `run` at its
concrete shapes on fake tensors (no data, no GPU) and lists every op with tensor shapes, dtypes,
the non-tensor arguments and the reference source line that issued it.

Backends (fixed; one never falls back to the other):
- aten: torch.fx.experimental.proxy_tensor.make_fx in fake mode (ATen ops after dispatch).
- fx: a TorchFunctionMode that records torch-function calls (torch.*, Tensor methods,
  torch.nn.functional.*), outermost call only.
The script handles its own errors and exits 0 with {"result": "error", "kind", "message"}.
"""

import json
import math
import sys
import traceback

REF_FILE = "reference.py"

# Tensor methods that only read metadata and produce no data.
METADATA = {
    "size", "dim", "ndim", "shape", "dtype", "device", "numel", "stride", "is_contiguous",
    "element_size", "nelement", "data_ptr", "storage_offset", "__len__", "is_floating_point",
    "is_cuda", "layout", "requires_grad", "__format__", "__repr__", "__hash__", "get_device",
    "is_complex", "names", "__iter__", "nbytes", "itemsize", "is_meta", "__index__",
}


def reply(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, allow_nan=False)


def main():
    out_path = sys.argv[1]
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001
        reply(out_path, {"result": "error", "kind": "torch_missing", "message": f"failed to import torch: {e}"})
        return 0
    try:
        req = json.load(sys.stdin)
    except Exception as e:  # noqa: BLE001
        reply(out_path, {"result": "error", "kind": "bad_request", "message": str(e)})
        return 0
    results = []
    for a in req.get("analyses", []):
        try:
            results.append(analyze(a))
        except TraceFailure as e:
            results.append({"id": a.get("id"), "ok": False, "kind": e.kind, "message": e.message})
        except Exception as e:  # noqa: BLE001
            tb = traceback.format_exc(limit=-6)
            results.append({"id": a.get("id"), "ok": False, "kind": "trace_error",
                            "message": f"{type(e).__name__}: {e}\n{tb}"})
    import torch
    reply(out_path, {"result": "success", "torch_version": torch.__version__, "analyses": results})
    return 0


class TraceFailure(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def torch_dtype(name):
    import torch
    alias = {"float4_e2m1": "float4_e2m1fn_x2"}
    dt = getattr(torch, name, None) or getattr(torch, alias.get(name, ""), None)
    if dt is None:
        raise TraceFailure("unsupported_dtype", f"torch {torch.__version__} has no dtype `{name}`")
    return dt


def load_module(a):
    import types
    mod = types.ModuleType("kg_reference")
    mod.__file__ = REF_FILE
    code = compile(a["reference"], REF_FILE, "exec")
    exec(code, mod.__dict__)  # noqa: S102 - the user's own reference, in the user's interpreter
    fn = getattr(mod, "run", None)
    if fn is None:
        raise TraceFailure("no_run", "the reference defines no global function `run`")
    return mod, fn


def make_inputs(a, mod, fake_mode):
    """Fake tensors (device cpu, no storage) for every tensor input; Python values for scalars."""
    import torch
    custom = None
    if any(i["kind"] == "custom" for i in a["inputs"]):
        ep = a.get("custom_inputs_entrypoint")
        fn = getattr(mod, ep or "", None)
        if fn is None:
            raise TraceFailure("custom_inputs", "workload uses `custom` inputs but the reference has no custom_inputs_entrypoint")
        scalars = {i["name"]: i["value"] for i in a["inputs"] if i["kind"] == "scalar"}
        arg = {**a["axes"], **scalars}
        try:
            custom = fn(arg, "meta")
        except Exception:  # noqa: BLE001 - some generators need real data; CPU is the fallback
            custom = fn(arg, "cpu")
    vals = []
    with fake_mode:
        for i in a["inputs"]:
            if i["kind"] == "scalar":
                vals.append(i["value"])
            elif i["kind"] == "custom":
                v = custom[i["name"]]
                if isinstance(v, torch.Tensor):
                    vals.append(torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="cpu"))
                else:
                    vals.append(v)
            elif i["shape"] is None:
                dt = torch_dtype(i["dtype"])
                vals.append(1.0 if dt.is_floating_point else 1)
            else:
                vals.append(torch.empty(tuple(i["shape"]), dtype=torch_dtype(i["dtype"]), device="cpu"))
    return vals


def enc_value(v, tid):
    """JSON encoding of an argument: tensors by id, the rest by value."""
    import torch
    if isinstance(v, torch.Tensor):
        t = tid(v)
        return {"tensor": t} if t is not None else {"repr": "untracked tensor"}
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"float": repr(v)}
    if isinstance(v, (list, tuple, torch.Size)):
        return [enc_value(x, tid) for x in v]
    if isinstance(v, dict):
        return {"dict": {str(k): enc_value(x, tid) for k, x in v.items()}}
    if isinstance(v, torch.dtype):
        return {"dtype": dtype_name(v)}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, slice):
        return {"slice": [enc_value(v.start, tid), enc_value(v.stop, tid), enc_value(v.step, tid)]}
    if v is Ellipsis:
        return {"ellipsis": True}
    try:
        from torch.fx import Node
        if isinstance(v, Node):
            t = tid(v)
            return {"tensor": t} if t is not None else {"repr": str(v)}
    except ImportError:
        pass
    return {"repr": repr(v)[:200]}


def tensor_meta(t):
    return {"shape": [int(s) for s in t.shape], "dtype": dtype_name(t.dtype)}


def flatten_outputs(res, names):
    import torch
    if isinstance(res, dict):
        vals = [res.get(n) for n in names]
    elif isinstance(res, (tuple, list)):
        vals = list(res)
    else:
        vals = [res]
    if len(vals) != len(names):
        raise TraceFailure("outputs", f"`run` returned {len(vals)} value(s), the definition declares {len(names)} ({', '.join(names)})")
    for n, v in zip(names, vals):
        if not isinstance(v, torch.Tensor):
            raise TraceFailure("outputs", f"output `{n}` is a {type(v).__name__}, not a tensor")
    return vals


def ref_line(frames):
    lines = [f"{REF_FILE}:{fr.lineno}" for fr in frames if fr.filename == REF_FILE]
    return lines[-1] if lines else None


def analyze(a):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    mod, fn = load_module(a)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    inputs = make_inputs(a, mod, fake_mode)
    if a["backend"] == "aten":
        return trace_aten(a, fn, inputs, fake_mode)
    if a["backend"] == "fx":
        return trace_fx(a, fn, inputs, fake_mode)
    raise TraceFailure("bad_backend", f"unknown backend `{a['backend']}`; expected aten or fx")


def graph_inputs(a, inputs, tid):
    import torch
    out = []
    for spec, v in zip(a["inputs"], inputs):
        if isinstance(v, torch.Tensor):
            out.append({"name": spec["name"], "tensor": tid(v)})
        else:
            out.append({"name": spec["name"], "scalar": enc_value(v, tid)})
    return out


def trace_aten(a, fn, inputs, fake_mode):
    import operator
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.proxy_tensor import PythonKeyTracer
    import traceback as tb_mod

    # make_fx keeps only frames named `forward`; this private process keeps the reference's own
    # frames instead, so every op can name its source line.
    orig_filter = PythonKeyTracer._filter_traceback_frames

    def keep_reference(self, summary):
        return tb_mod.StackSummary.from_list([f for f in summary if f.filename == REF_FILE])

    PythonKeyTracer._filter_traceback_frames = keep_reference
    try:
        gm = make_fx(fn, tracing_mode="fake", record_stack_traces=True)(*inputs)
    finally:
        PythonKeyTracer._filter_traceback_frames = orig_filter
    tensors = {}
    alias = {}  # getitem node name -> tensor id of the element

    def node_tid(n):
        if isinstance(n, torch.fx.Node):
            return alias.get(n.name, n.name if n.name in tensors else None)
        return None

    def register(name, val):
        if isinstance(val, torch.Tensor):
            tensors[name] = tensor_meta(val)
            return [name]
        if isinstance(val, (tuple, list)):
            ids = []
            for i, x in enumerate(val):
                if isinstance(x, torch.Tensor):
                    tensors[f"{name}.{i}"] = tensor_meta(x)
                    ids.append(f"{name}.{i}")
                else:
                    ids.append(None)
            return ids
        return []

    ops, ginputs, goutputs = [], [], []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for spec, n in zip(a["inputs"], placeholders):
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            register(n.name, val)
            ginputs.append({"name": spec["name"], "tensor": n.name})
        else:
            ginputs.append({"name": spec["name"], "scalar": enc_value(spec.get("value"), lambda _: None)})
    for n in gm.graph.nodes:
        if n.op == "call_function":
            if n.target is operator.getitem:
                src, idx = n.args
                alias[n.name] = f"{src.name}.{idx}" if f"{src.name}.{idx}" in tensors else node_tid(src)
                continue
            outs = register(n.name, n.meta.get("val"))
            st = n.meta.get("stack_trace") or ""
            loc = None
            for line in st.splitlines():
                line = line.strip()
                if line.startswith(f'File "{REF_FILE}"'):
                    parts = line.split(",")
                    if len(parts) > 1:
                        loc = f"{REF_FILE}:{parts[1].strip().replace('line ', '')}"
            ops.append({
                "op": str(n.target),
                "args": [enc_value(x, node_tid) for x in n.args],
                "kwargs": {k: enc_value(v, node_tid) for k, v in n.kwargs.items()},
                "outputs": outs,
                "loc": loc,
            })
        elif n.op == "output":
            flat = n.args[0]
            if isinstance(flat, dict):
                flat = [flat.get(k) for k in a.get("outputs") or []]
            flat = list(flat) if isinstance(flat, (tuple, list)) else [flat]
            for x in flat:
                if isinstance(x, (tuple, list)):
                    raise TraceFailure("outputs", "`run` returned a nested structure; return a tensor or a flat tuple")
                goutputs.append(node_tid(x))
        elif n.op not in ("placeholder",):
            raise TraceFailure("trace_error", f"unexpected fx node kind `{n.op}` ({n.target})")
    if isinstance(a.get("outputs"), list) and len(goutputs) != len(a["outputs"]):
        raise TraceFailure("outputs", f"`run` returned {len(goutputs)} value(s), the definition declares {len(a['outputs'])}")
    return {"id": a["id"], "ok": True, "backend": "aten", "tensors": tensors, "inputs": ginputs,
            "outputs": goutputs, "ops": ops, "ignored": []}


def fx_name(func):
    import torch
    name = getattr(func, "__name__", None)
    self_ = getattr(func, "__self__", None)
    if name == "__get__" and self_ is not None:  # property getter, e.g. Tensor.shape / Tensor.T
        return "Tensor." + getattr(self_, "__name__", "?")
    objclass = getattr(func, "__objclass__", None)
    if objclass is not None and issubclass(objclass, torch._C.TensorBase):
        return "Tensor." + name
    qual = getattr(func, "__qualname__", name) or repr(func)
    if qual.startswith(("Tensor.", "TensorBase.", "_TensorBase.")):
        return "Tensor." + qual.split(".", 1)[1]
    mod = getattr(func, "__module__", None) or ""
    if mod.startswith("torch._C._nn") or mod == "torch.nn.functional":
        return "torch.nn.functional." + name
    if mod.startswith("torch._C._linalg") or mod == "torch.linalg":
        return "torch.linalg." + name
    if mod.startswith("torch._C._special") or mod == "torch.special":
        return "torch.special." + name
    if mod in ("torch", "torch.functional", "torch._C._VariableFunctions", "torch.random") or mod.startswith("torch._C"):
        return "torch." + name
    return f"{mod}.{qual}"


def trace_fx(a, fn, inputs, fake_mode):
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten

    ids = {}
    keep = []
    tensors = {}

    def tid(t):
        if not isinstance(t, torch.Tensor):
            return None
        k = id(t)
        if k not in ids:
            ids[k] = f"t{len(ids)}"
            keep.append(t)
            tensors[ids[k]] = tensor_meta(t)
        return ids[k]

    ginputs = graph_inputs(a, inputs, tid)
    ops, ignored = [], {}

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = fx_name(func)
            short = name.rsplit(".", 1)[-1]
            flat_out, _ = tree_flatten(out)
            touts = [x for x in flat_out if isinstance(x, torch.Tensor)]
            if short in METADATA or not touts:
                ignored[name] = ignored.get(name, 0) + 1
                return out
            # Inputs are named before outputs so in-place results keep their input's id.
            enc_args = [enc_value(x, tid) for x in args]
            enc_kwargs = {k: enc_value(v, tid) for k, v in kwargs.items()}
            outs = []
            for x in flat_out:
                if isinstance(x, torch.Tensor):
                    fresh = id(x) not in ids
                    t = tid(x)
                    if not fresh:
                        tensors[t] = tensor_meta(x)
                    outs.append(t)
            ops.append({"op": name, "args": enc_args, "kwargs": enc_kwargs, "outputs": outs,
                        "loc": ref_line(traceback.extract_stack())})
            return out

    with fake_mode, Recorder():
        res = fn(*inputs)
    outs = flatten_outputs(res, a.get("outputs") or [])
    return {"id": a["id"], "ok": True, "backend": "fx", "tensors": tensors, "inputs": ginputs,
            "outputs": [tid(t) for t in outs], "ops": ops,
            "ignored": sorted(ignored)}


if __name__ == "__main__":
    sys.exit(main())
