"""kernelgate judge worker (trusted code only; embedded in kg-exec).

Generates inputs from workloads with a secret per-run seed, runs the reference, keeps its
outputs in memory, compares candidate outputs and decides statuses. It never imports a
candidate's code: candidate outputs arrive as raw bytes behind a header it checks, in the
candidate's device memory pool it copies them out of (`kgcommon.read_device_outputs`) or in a
file (`kgcommon.read_outputs`), never as a pickle.
Correctness rounds come in batches (`prepare_rounds`, `check_rounds`).
"""

import hashlib
import math
import os
import secrets
import statistics
import sys
import time
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kgcommon as kg  # noqa: E402

kg.start_parent_watchdog()


def _not_dumpable():
    """prctl(PR_SET_DUMPABLE, 0): /proc/<judge>/mem (and environ, fds) become unreadable to
    other processes of the same non-root user, so a candidate cannot copy the reference
    outputs out of the judge's memory. A root candidate (CAP_SYS_PTRACE) is not stopped."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 4
    except Exception:
        return False


DUMPABLE_OFF = _not_dumpable()

import torch  # noqa: E402

STATE = {
    "device": torch.device("cpu"),
    "seed": None,
    "definition": None,
    "module": None,
    "ref_out": {},
    "ref_rounds": {},
}


def op_hello(req):
    dev = kg.resolve_device(req.get("device", "cpu"))
    kg.fast_torch_save()
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return kg.error_reply("device", f"device `{req.get('device')}` requested, but torch reports no CUDA/HIP device")
        if dev.index >= torch.cuda.device_count():
            return kg.error_reply("device", f"device index {dev.index} out of range: torch sees {torch.cuda.device_count()} device(s)")
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
        if req.get("cupti"):
            kg.cupti_warmup(dev)
        kg.output_stage(kg.OUTPUT_STAGE_BYTES, dev)  # pinned once here, not in a workload
    STATE["device"] = dev
    # Everything the judge may import later is imported now, before any candidate has run,
    # so a module planted afterwards (in a directory on sys.path) is never picked up.
    for name in ("safetensors.torch",) + (("pynvml",) if dev.type == "cuda" else ()):
        try:
            __import__(name)
        except Exception:
            pass
    seed = req.get("seed")
    STATE["seed"] = int(seed) if seed is not None else secrets.randbits(62)
    return {"result": "ok", "environment": kg.environment(dev), "dumpable_off": DUMPABLE_OFF}


def op_setup(req):
    """Loads a definition's reference into a fresh module."""
    d = req["definition"]
    STATE["definition"] = d
    STATE["ref_out"] = {}
    STATE["ref_rounds"] = {}
    work = req["work_dir"]
    path = os.path.join(work, "kg_reference_%s.py" % hashlib.sha256(d["reference"].encode()).hexdigest()[:12])
    with open(path, "w") as f:
        f.write(d["reference"])
    problem_dir = req.get("problem_dir")
    if problem_dir and problem_dir not in sys.path:
        # Last, never ahead of the stdlib or site-packages: a module a candidate planted in
        # the problem directory (numpy.py, pynvml.py) cannot shadow what the judge imports.
        sys.path.append(problem_dir)
    mod = types.ModuleType("kg_reference")
    mod.__file__ = path
    try:
        code = compile(d["reference"], path, "exec")
        exec(code, mod.__dict__)
    except Exception as e:
        return kg.error_reply("reference", f"the reference failed to load: {type(e).__name__}: {e}", traceback.format_exc())
    if not callable(mod.__dict__.get("run")):
        return kg.error_reply("reference", "the reference defines no callable `run`")
    STATE["module"] = mod
    # Custom inputs are drawn through the reference's own module (kgcommon.random_input_set).
    kg.custom_module(d["reference"], mod)
    return {"result": "ok"}


# ---------------------------------------------------------------- inputs


def _derive_seed(uuid, round_, salt):
    h = hashlib.sha256(f"{STATE['seed']}:{uuid}:{round_}:{salt}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 62) - 1)


def _round_seed(workload, round_):
    """The seed correctness round `round_` draws its inputs from (`prepare` and `draws` alike)."""
    return _derive_seed(workload["uuid"], int(round_), "inputs")


def _draw(spec, seed):
    """What the candidate gets to draw a round's inputs itself (the parent compares `draws`
    against `prepare`'s `input` as JSON)."""
    return {"spec": spec, "seed": str(seed)}


def _input_spec(workload, shapes, axes):
    """(spec, files): the `kgcommon.random_input_set` spec of a workload's inputs (random,
    scalar, or custom: the problem's own generator, run from the reference's source on either
    side), where an input read from safetensors is a `{"value": None, "safetensors": name}`
    placeholder that gen_inputs fills from its file; files tells whether there is one."""
    d = STATE["definition"]
    specs = workload["inputs"]
    out = []
    custom = files = False
    for name, tspec in d["inputs"].items():
        s = specs[name]
        t = s.get("type")
        if t == "scalar":
            out.append({"value": s["value"]})
        elif t == "custom":
            out.append({"custom": name})
            custom = True
        elif t == "safetensors":
            out.append({"value": None, "safetensors": name})
            files = True
        elif t == "generated":
            out.append({"name": name, "dtype": tspec["dtype"], "shape": shapes[name],
                        "generator": _resolved_generator(s["generator"], axes)})
        elif t == "random":
            out.append({"name": name, "dtype": tspec["dtype"], "shape": shapes[name]})
        else:
            raise RuntimeError(f"input `{name}` has type {t!r}, which the judge does not know")
    if not custom:
        return out, files
    ep = d.get("custom_inputs_entrypoint")
    if not ep or not callable(getattr(STATE["module"], ep, None)):
        raise RuntimeError("workload uses `custom` inputs but the reference has no custom_inputs_entrypoint")
    scalars = {k: s["value"] for k, s in specs.items() if s.get("type") == "scalar"}
    c = {"source": d["reference"], "entrypoint": ep, "args": {**axes, **scalars}}
    if workload.get("schema_version") is not None:
        c["names"] = [n for n in d["inputs"] if specs[n].get("type") == "custom"]
    return {"custom": c, "inputs": out}, files


def _resolved_generator(g, axes):
    """Generator `g` with an integer generator's expression bounds evaluated over `axes` (the
    loader evaluated them the same way and checked them against the dtype)."""
    if g.get("type") != "integer":
        return g
    return {**g, "low": _axis_int(g["low"], axes), "high": _axis_int(g["high"], axes)}


def _axis_int(v, axes):
    """An integer bound: a literal, or an expression of axis names, integers, + - * / // % **
    and parentheses (kg-contract's shape grammar; `/` must divide exactly)."""
    import ast
    import operator

    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, str):
        raise ValueError(f"bound {v!r} is neither an integer nor an expression")
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}

    def ev(n):
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name) and n.id in axes:
            return int(axes[n.id])
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            x = ev(n.operand)
            return -x if isinstance(n.op, ast.USub) else x
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            a, b = ev(n.left), ev(n.right)
            if b == 0 or a % b:
                raise ValueError(f"`{v}`: {a} / {b} is not an integer")
            return a // b
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](ev(n.left), ev(n.right))
        raise ValueError(f"`{v}`: unsupported expression")

    return ev(ast.parse(v, mode="eval").body)


def random_spec(workload, shapes, axes):
    """The spec the candidate draws a workload's inputs from (_input_spec); None when an input
    is read from safetensors (those sets travel as files) or a custom one has no generator."""
    try:
        spec, files = _input_spec(workload, shapes, axes)
    except RuntimeError:
        return None  # gen_inputs says why
    return None if files else spec


def gen_inputs(workload, shapes, axes, seed):
    spec, files = _input_spec(workload, shapes, axes)
    out = kg.random_input_set(spec, seed, STATE["device"])
    if files:
        import safetensors.torch as st

        entries = spec["inputs"] if isinstance(spec, dict) else spec
        for i, e in enumerate(entries):
            if "safetensors" in e:
                s = workload["inputs"][e["safetensors"]]
                p = s["path"]
                if not os.path.isabs(p):
                    p = os.path.join(STATE["problem_dir"], p)
                out[i] = st.load_file(p)[s["tensor_key"]].to(STATE["device"])
    return out


def _clone(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def normalize_outputs(res):
    d = STATE["definition"]
    names = list(d["outputs"].keys())
    if isinstance(res, dict):
        vals = [res.get(n) for n in names]
    elif isinstance(res, (tuple, list)):
        vals = list(res)
    else:
        vals = [res]
    if len(vals) != len(names):
        raise ValueError(f"returned {len(vals)} output(s), the definition declares {len(names)} ({', '.join(names)})")
    out = []
    for n, v in zip(names, vals):
        if not isinstance(v, torch.Tensor):
            v = torch.tensor(v, dtype=kg.torch_dtype(d["outputs"][n]["dtype"]), device=STATE["device"])
        out.append(v)
    return out


def run_reference(inputs, sync=True):
    res = STATE["module"].run(*[_clone(x) for x in inputs])
    if sync and STATE["device"].type == "cuda":
        torch.cuda.synchronize()
    return normalize_outputs(res)


def _nan_everywhere(outs):
    """Per output of `outs`, a device flag: floating, not empty, and NaN in every element
    (read back by the caller, once for a whole batch of rounds)."""
    return [torch.isnan(o).all() if o.numel() > 0 and (o.dtype.is_floating_point or o.dtype.is_complex) else None
            for o in outs]


def _check_declared(outs, shapes):
    d = STATE["definition"]
    for (n, spec), o in zip(d["outputs"].items(), outs):
        want = shapes.get(n)
        want_shape = [] if want is None else list(want)
        if list(o.shape) != want_shape:
            return f"output `{n}` has shape {list(o.shape)}, the definition declares {want_shape}"
        if kg.dtype_name(o.dtype) != spec["dtype"]:
            return f"output `{n}` has dtype {kg.dtype_name(o.dtype)}, the definition declares {spec['dtype']}"
    return None


def op_prepare(req, batched=False):
    """Generates round inputs, hands them to the candidate (as the round's seed when no input is
    read from a file, else as a file), runs and keeps the reference. `batched` (op_prepare_rounds):
    the reference is not waited for, and its NaN-everywhere check is left to the caller (one
    synchronisation a batch: the GPU runs a round's reference while the next round's inputs
    are drawn)."""
    w = req["workload"]
    r = int(req["round"])
    STATE["problem_dir"] = req.get("problem_dir") or "."
    seed = _round_seed(w, r)
    ms = {}
    t_gen = time.perf_counter()
    try:
        inputs = gen_inputs(w, req["input_shapes"], req["axes"], seed)
    except Exception as e:
        return kg.error_reply("invalid_reference", f"failed to generate inputs: {type(e).__name__}: {e}", traceback.format_exc())
    spec = random_spec(w, req["input_shapes"], req["axes"]) if req.get("generate") else None
    drawn = None
    if spec is not None:
        # The candidate draws the same inputs from this round's seed; nothing is written.
        drawn = _draw(spec, seed)
    else:
        torch.save([x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs], req["path"])
    t_digest = time.perf_counter()
    ms["inputs"] = (t_digest - t_gen) * 1e3
    digest = kg.digest(inputs) if drawn is not None and req.get("digest") else None
    try:
        t0 = time.perf_counter()
        ms["digest"] = (t0 - t_digest) * 1e3
        ref = run_reference(inputs, sync=not batched)
        ref_s = time.perf_counter() - t0
    except Exception as e:
        return kg.error_reply("invalid_reference", f"the reference raised: {type(e).__name__}: {e}", traceback.format_exc())
    bad = _check_declared(ref, req["output_shapes"])
    if bad:
        return kg.error_reply("invalid_reference", "the reference's " + bad)
    if not batched:
        bad = _nan_reply(_read_flags([_nan_everywhere(ref)])[0])
        if bad is not None:
            return bad
    t_const = time.perf_counter()
    if req.get("check_constant"):
        has_random = any(s.get("type") in ("random", "custom")
                         or (s.get("type") == "generated" and s["generator"].get("type") != "constant")
                         for s in w["inputs"].values())
        if has_random:
            try:
                other = gen_inputs(w, req["input_shapes"], req["axes"], _derive_seed(w["uuid"], r, "constant-check"))
                ref2 = run_reference(other)
            except Exception as e:
                return kg.error_reply("invalid_reference", f"the reference raised on a second input set: {type(e).__name__}: {e}", traceback.format_exc())
            if all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(ref, ref2)):
                return kg.error_reply(
                    "invalid_reference",
                    "the reference returned identical outputs for two different random input sets: its result does not depend on its inputs")
    STATE["ref_out"] = {"round": r, "outputs": ref, "inputs": inputs}
    ms["reference"] = ref_s * 1e3
    ms["checks"] = (time.perf_counter() - t_const) * 1e3
    # Where a round's time goes (the parent logs it).
    reply = {"result": "ok", "reference_s": ref_s, "ms": ms}
    if drawn is not None:
        reply["input"] = drawn
        if digest is not None:
            reply["digest"] = digest
    return reply


# ---------------------------------------------------------------- comparison


def _invalid(outs, ref):
    """Why `outs` cannot be compared with `ref` at all (count, type, shape, dtype), or None."""
    d = STATE["definition"]
    names = list(d["outputs"].keys())
    if not isinstance(outs, list) or len(outs) != len(names):
        n = len(outs) if isinstance(outs, list) else "a non-list"
        return {"status": "INCORRECT_SHAPE", "reason": "output_count", "message": f"the candidate returned {n} output(s), expected {len(names)} ({', '.join(names)})"}
    for n, o in zip(names, outs):
        if isinstance(o, str) and o.startswith("kg:reward_hack:"):
            return {"status": "REWARD_HACK", "reason": "output_subclass", "message": f"output `{n}` is a torch.Tensor subclass ({o[len('kg:reward_hack:'):]}); only plain torch.Tensor outputs are accepted"}
    for n, o, r in zip(names, outs, ref):
        if type(o) is not torch.Tensor and not isinstance(o, kg.ForeignTensor):
            return {"status": "INCORRECT_SHAPE", "reason": "output_not_tensor", "message": f"output `{n}` is a {type(o).__name__}, expected a torch.Tensor"}
        if o.shape != r.shape:
            return {"status": "INCORRECT_SHAPE", "reason": "output_shape", "message": f"output `{n}` has shape {list(o.shape)}, expected {list(r.shape)}"}
    for n, o, r in zip(names, outs, ref):
        got = o.dtype_name if isinstance(o, kg.ForeignTensor) else kg.dtype_name(o.dtype)
        if got != kg.dtype_name(r.dtype):
            return {"status": "INCORRECT_DTYPE", "reason": "output_dtype", "message": f"output `{n}` has dtype {got}, expected {kg.dtype_name(r.dtype)}"}
    return None


def _figures(o, r, atol, rtol, allow_ninf):
    """The comparison's figures for R rounds of one output at once (`o`, `r`: [R, ...] on the
    device), as an [R, 8] tensor: NaN seen, Inf seen, mismatched NaN/Inf count, matched ratio,
    max abs error, max rel error, output all zero, reference has a finite non-zero."""
    rows = o.shape[0]
    of = o.reshape(rows, -1)
    rf = r.reshape(rows, -1)
    of = of.float() if of.dtype != torch.float32 else of
    rf = rf.float() if rf.dtype != torch.float32 else rf
    o_nan, r_nan = torch.isnan(of), torch.isnan(rf)
    o_inf, r_inf = torch.isinf(of), torch.isinf(rf)
    special_ok = torch.zeros_like(o_nan)
    if allow_ninf:
        special_ok = (of == -math.inf) & (rf == -math.inf)
    special = o_nan | r_nan | o_inf | r_inf
    bad_special = special & ~special_ok
    finite = ~special
    diff = torch.where(finite, (of - rf).abs(), torch.zeros_like(of))
    ok = (diff <= atol + rtol * rf.abs()) & finite | special_ok
    rel = diff / torch.clamp(rf.abs(), min=atol if atol > 0 else 1e-12)
    return torch.stack([
        (o_nan.any(1) | r_nan.any(1)).double(),
        (o_inf.any(1) | r_inf.any(1)).double(),
        bad_special.sum(1).double(),
        # Counted exactly (a float32 mean rounds one mismatch in 2**25 elements away).
        ok.sum(1).double() / max(of.shape[1], 1),
        diff.amax(1).double(),
        torch.where(finite, rel, torch.zeros_like(rel)).amax(1).double(),
        ((of == 0) | special).all(1).double(),  # every finite output element is zero
        ((rf != 0) & finite).any(1).double(),  # some finite reference element is not
    ], dim=1)


def _rows(ts):
    """Tensors of one shape as the rows of one tensor (a single one as a view, not a copy)."""
    return ts[0].unsqueeze(0) if len(ts) == 1 else torch.stack(ts)


def compare_many(pairs, tol, inputs=None):
    """Check results (status + metrics) for (outputs, reference outputs) pairs, in order, ending
    at the first that did not pass. The rounds' elementwise work is done for all pairs at once,
    per output, and every figure comes back in one device-to-host copy: per round and output,
    this was ~40 small kernel launches and a synchronisation (0.8-2.7 ms a round on an H200).
    A v2 workload's `tol` is {"checks": [...]} (compare_checks; `inputs`: per pair, the inputs
    its top-k routing checks score by name)."""
    if "checks" in tol:
        return compare_checks(pairs, tol["checks"], inputs)
    d = STATE["definition"]
    names = list(d["outputs"].keys())
    atol, rtol = float(tol["max_atol"]), float(tol["max_rtol"])
    need = float(tol["required_matched_ratio"])
    cap = tol.get("max_error_cap")
    allow_ninf = bool(tol.get("allow_negative_inf", False))
    dev = STATE["device"]
    valid = []
    stop = None
    for outs, ref in pairs:
        bad = _invalid(outs, ref)
        if bad is not None:
            stop = bad
            break
        valid.append((outs, ref))
    figs = {}
    for k in range(len(names)):
        if valid and valid[0][1][k].numel() > 0:
            o = _rows([outs[k].to(dev) for outs, _ in valid])
            r = _rows([ref[k].to(dev) for _, ref in valid])
            figs[k] = _figures(o, r, atol, rtol, allow_ninf)
    keys = sorted(figs)
    host = torch.stack([figs[k] for k in keys]).tolist() if keys else []
    results = []
    for j in range(len(valid)):
        res = {"max_abs": 0.0, "max_rel": 0.0, "matched_ratio": 1.0, "has_nan": False, "has_inf": False}
        fail = None
        for pos, k in enumerate(keys):
            n = names[k]
            has_nan, has_inf, bad, ratio, max_abs, max_rel, out_zero, ref_nonzero = host[pos][j]
            res["has_nan"] |= bool(has_nan)
            res["has_inf"] |= bool(has_inf)
            if bad > 0:
                fail = fail or f"output `{n}`: {int(bad)} element(s) are NaN/Inf in the output or the reference where the other side differs"
            res["max_abs"] = max(res["max_abs"], max_abs)
            res["max_rel"] = max(res["max_rel"], max_rel)
            res["matched_ratio"] = min(res["matched_ratio"], ratio)
            if ratio < need:
                fail = fail or f"output `{n}`: {ratio:.6f} of elements within atol={atol} rtol={rtol}, {need} required; max abs error {max_abs:.6g}, max rel error {max_rel:.6g}"
            if cap is not None and max_abs > float(cap):
                fail = fail or f"output `{n}`: max abs error {max_abs:.6g} exceeds max_error_cap {cap}"
            if out_zero and ref_nonzero:
                fail = fail or f"output `{n}` is all zeros but the reference is not"
        res["status"] = "INCORRECT_NUMERICAL" if fail else "PASSED"
        if fail:
            res["message"] = fail
            res["reason"] = "numerical_mismatch"
        results.append(res)
        if fail:
            return results
    if stop is not None:
        results.append(stop)
    return results


# ---------------------------------------------------------------- v2 workload checks
#
# The ROCm port's closed set of per-output checks (its workload.py and output_checks.py), with
# its semantics; where the port would let a wrong output through by accident (a NaN skipped by
# a Python `max`, an expert id past the table, -inf making `max |r|` infinite), the check here
# fails closed instead. Every round's figures come back in one device-to-host copy.

_NUMERIC_FIGS = 11  # bad, has_nan, has_inf, out_nonzero, ref_nonzero, total, exceed, max_abs, max_rel, max_ref, ref_norm
_TOPK_FIGS = 5  # mismatched rows, rows, max weight error, non-finite weights, shapes unusable


def _numeric_figs(o, r, c):
    """[R, _NUMERIC_FIGS] figures of one numeric check over R rounds (`o`, `r`: [R, ...])."""
    rows = o.shape[0]
    of = o.reshape(rows, -1).float()
    rf = r.reshape(rows, -1).float()
    if of.shape[1] == 0:
        return torch.zeros(rows, _NUMERIC_FIGS, dtype=torch.float64, device=of.device)
    atol, rtol = float(c["max_atol"]), float(c["max_rtol"])
    if c["allow_negative_inf"]:
        ninf = (of == -math.inf) & (rf == -math.inf)
    else:
        ninf = torch.zeros_like(of, dtype=torch.bool)
    fin = torch.isfinite(of) & torch.isfinite(rf)
    bad = ~fin & ~ninf
    bad_any = bad.any(1)
    nan_any = (torch.isnan(of) | torch.isnan(rf)).any(1)
    zero = torch.zeros_like(of)
    diff = torch.where(fin, (of - rf).abs(), zero)
    ra = torch.where(fin, rf.abs(), zero)
    exceed = (diff > atol + rtol * ra) & fin
    rel = diff / torch.clamp(ra, min=atol if atol > 0 else 1e-12)
    return torch.stack([
        bad.sum(1).double(),
        (bad_any & nan_any).double(),
        (bad_any & ~nan_any).double(),
        (of != 0).any(1).double(),
        (rf != 0).any(1).double(),
        (~ninf).sum(1).double(),
        exceed.sum(1).double(),
        diff.amax(1).double(),
        rel.amax(1).double(),
        ra.amax(1).double(),
        torch.linalg.vector_norm(torch.where(fin, rf, zero), dim=1, dtype=torch.float64),
    ], dim=1)


def _numeric_verdict(c, f):
    """(passed, figures for the trace, failure message) of a numeric check from one round's
    _numeric_figs row."""
    bad, has_nan, has_inf, out_nz, ref_nz, total, exceed, max_abs, max_rel, max_ref, norm = f
    cap = c.get("max_error_cap")
    n = c["output"]
    fail = None
    ratio = 1.0
    if bad > 0:
        max_abs = max_rel = 0.0
        ratio = 0.0
        fail = f"output `{n}`: {int(bad)} element(s) are NaN/Inf in the output or the reference (only -inf on both sides may match, with allow_negative_inf)"
    elif ref_nz and not out_nz:
        max_abs = max_rel = norm
        ratio = 0.0
        if c["mode"] != "normalized_max" or norm > float(c["max_rtol"]) or (cap is not None and norm > float(cap)):
            fail = f"output `{n}` is all zeros but the reference is not (reference norm {norm:.6g})"
        else:
            ratio = 1.0
    elif c["mode"] == "normalized_max":
        max_rel = max_abs / (max_ref + float(c["denominator_epsilon"]))
        if max_rel > float(c["max_rtol"]):
            ratio = 0.0
            fail = f"output `{n}`: max |o-r| / (max |r| + eps) = {max_rel:.6g} exceeds max_rtol {c['max_rtol']} (max abs error {max_abs:.6g})"
    elif total > 0:
        ratio = 1.0 - exceed / total
        if ratio < float(c["required_matched_ratio"]):
            fail = (f"output `{n}`: {int(exceed)} of {int(total)} element(s) outside atol={c['max_atol']} rtol={c['max_rtol']} "
                    f"(matched ratio {ratio:.9f}, {c['required_matched_ratio']} required); max abs error {max_abs:.6g}, max rel error {max_rel:.6g}")
    if fail is None and cap is not None and max_abs > float(cap):
        ratio = 0.0 if c["mode"] == "normalized_max" else ratio
        fail = f"output `{n}`: max abs error {max_abs:.6g} exceeds max_error_cap {cap}"
    figs = {"mode": c["mode"], "max_absolute_error": max_abs, "max_relative_error": max_rel,
            "matched_ratio": max(0.0, min(1.0, ratio)), "has_nan": bool(has_nan), "has_inf": bool(has_inf)}
    return fail is None, figs, fail


def _exact_figs(o, r, c):
    rows = o.shape[0]
    mism = (o.reshape(rows, -1) != r.reshape(rows, -1)).sum(1).double()
    total = torch.full_like(mism, float(o[0].numel()))
    return torch.stack([mism, total], dim=1)


def _exact_verdict(c, f):
    mism, total = int(f[0]), int(f[1])
    fail = None if mism == 0 else f"output `{c['output']}`: {mism} of {total} element(s) differ (exact check)"
    return fail is None, {"mismatched_elements": mism, "total_elements": total}, fail


def _codes(t, mode):
    rows = t.shape[0]
    if mode == "raw_bits":
        return t.contiguous().view(torch.uint8).reshape(rows, -1).to(torch.int32)
    return t.reshape(rows, -1).to(torch.int64)


def _code_distance_figs(o, r, c):
    oc, rc = _codes(o, c["mode"]), _codes(r, c["mode"])
    rows = oc.shape[0]
    if oc.shape[1] == 0:
        return torch.zeros(rows, 3, dtype=torch.float64, device=oc.device)
    oc, rc = oc.to(torch.int64), rc.to(torch.int64)
    # max - min >= 0; a negative difference wrapped past int64 (two extreme int64 codes), so
    # the distance is beyond any max_distance (abs() of a wrapped one would read as close).
    dist = torch.maximum(oc, rc) - torch.minimum(oc, rc)
    wrapped = dist < 0
    dist = torch.where(wrapped, torch.full_like(dist, (1 << 63) - 1), dist)
    matched = ((dist <= int(c["max_distance"])) & ~wrapped).sum(1).double()
    total = torch.full_like(matched, float(oc.shape[1]))
    return torch.stack([matched, total, dist.amax(1).double()], dim=1)


def _code_distance_verdict(c, f):
    matched, total, dist = int(f[0]), int(f[1]), min(int(f[2]), (1 << 63) - 1)
    ratio = 1.0 if total == 0 else matched / total
    fail = None
    if ratio < float(c["required_matched_ratio"]):
        fail = (f"output `{c['output']}`: {total - matched} of {total} code(s) more than {c['max_distance']} from the reference "
                f"({c['mode']}; largest distance {dist})")
    return fail is None, {"max_distance": dist, "matched_ratio": ratio}, fail


def _topk_round(ids_o, w_o, ids_r, w_r, gating, bias, c):
    """[_TOPK_FIGS] figures of one top-k routing check for one round: per token (row), the
    candidate's expert set must be the reference's but for experts tied (within tie_atol) at
    the k-th score, and each expert both chose must carry the reference's weight."""
    dev = ids_o.device
    k = int(c["topk"])
    scores = torch.softmax(gating.to(dev).float(), dim=-1)
    if bias is not None:
        scores = scores + bias.to(dev).float()
    e = scores.shape[-1] if scores.dim() > 0 else 0
    io = ids_o.reshape(-1, k).to(torch.int64)
    ir = ids_r.reshape(-1, k).to(torch.int64)
    rows = io.shape[0]
    if e < k or scores.numel() // max(e, 1) != rows:
        return torch.tensor([rows, rows, 0, 0, 1], dtype=torch.float64, device=dev)
    scores = scores.reshape(rows, e)
    if rows == 0:
        return torch.zeros(_TOPK_FIGS, dtype=torch.float64, device=dev)
    wo = w_o.reshape(rows, k).float()
    wr = w_r.reshape(rows, k).float()
    # Scores compare in float64, as the port's Python floats do.
    s64 = scores.double()
    cutoff = scores.topk(k, dim=-1).values[:, -1].double()
    tie = float(c["tie_atol"])
    oob = ((io < 0) | (io >= e)).any(1)
    srt = io.sort(1).values
    dup = (srt[:, 1:] == srt[:, :-1]).any(1) if k > 1 else torch.zeros_like(oob)
    eq = io.unsqueeze(2) == ir.unsqueeze(1)  # [rows, out position, ref position]
    out_in_ref = eq.any(2)
    ref_in_out = eq.any(1)
    s_out = s64.gather(1, io.clamp(0, e - 1))
    s_ref = s64.gather(1, ir.clamp(0, e - 1))
    extra_bad = ~out_in_ref & ~(s_out >= cutoff[:, None] - tie)
    missing_bad = ~ref_in_out & ~(s_ref <= cutoff[:, None] + tie)
    mismatch = oob | dup | extra_bad.any(1) | missing_bad.any(1)
    # The reference weight of the same expert (its last position, as the port's dict keeps).
    last = (k - 1) - eq.flip(2).to(torch.int32).argmax(2)
    werr = torch.where(out_in_ref, (wo - wr.gather(1, last)).abs(), torch.zeros_like(wo))
    finite = torch.isfinite(werr)
    return torch.stack([
        mismatch.sum().double(),
        torch.tensor(float(rows), dtype=torch.float64, device=dev),
        torch.where(finite, werr, torch.zeros_like(werr)).amax().double(),
        (~torch.isfinite(wo)).sum().double(),
        torch.tensor(0.0, dtype=torch.float64, device=dev),
    ])


def _topk_verdict(c, f):
    mism, rows, werr, nonfinite, unusable = f
    ratio = mism / max(rows, 1)
    fail = None
    if unusable:
        fail = f"`{c['gating_input']}` cannot score `{c['ids_output']}` (its last dimension is smaller than topk={c['topk']}, or its rows are not the ids' rows)"
    elif nonfinite:
        fail = f"output `{c['weights_output']}`: {int(nonfinite)} weight(s) are NaN/Inf"
    elif ratio > float(c["max_mismatch_ratio"]):
        fail = (f"outputs `{c['ids_output']}`/`{c['weights_output']}`: {int(mism)} of {int(rows)} token(s) routed to other experts "
                f"than the reference's (beyond ties within tie_atol={c['tie_atol']}), or to an id twice or out of range")
    elif werr > float(c["weight_atol"]):
        fail = f"output `{c['weights_output']}`: a chosen expert's weight is {werr:.6g} from the reference's, weight_atol {c['weight_atol']}"
    figs = {"genuine_mismatch_ratio": ratio, "max_matched_weight_error": werr}
    return fail is None, figs, fail


_CHECKS = {
    "numeric": (_numeric_figs, _numeric_verdict),
    "exact": (_exact_figs, _exact_verdict),
    "code_distance": (_code_distance_figs, _code_distance_verdict),
    "topk_routing": (None, _topk_verdict),
}


def routing_inputs(workload):
    """The input names a workload's top-k routing checks score (kept per round for them)."""
    names = []
    for c in workload.get("checks") or []:
        if c.get("type") == "topk_routing":
            names.append(c["gating_input"])
            if c.get("bias_input") is not None:
                names.append(c["bias_input"])
    return names


def keep_inputs(workload, inputs):
    """{name: value} of the inputs routing_inputs names, from a set in definition order."""
    want = routing_inputs(workload)
    if not want:
        return None
    order = list(STATE["definition"]["inputs"])
    return {n: inputs[order.index(n)] for n in want}


def compare_checks(pairs, checks, inputs=None):
    """compare_many for a v2 workload: every check of `checks` on every pair (each round runs
    all of them, as the port does), results ending at the first round that did not pass. A
    result holds, per check, what ran and its figures (`checks`), and the merged figures the
    trace's summary fields carry. `inputs[j]`: pair j's routing inputs by name."""
    d = STATE["definition"]
    names = list(d["outputs"].keys())
    pos = {n: k for k, n in enumerate(names)}
    dev = STATE["device"]
    valid = []
    stop = None
    for outs, ref in pairs:
        bad = _invalid(outs, ref)
        if bad is not None:
            stop = bad
            break
        valid.append((outs, ref))
    rows = []
    for c in checks:
        t = c.get("type")
        if t not in _CHECKS:
            raise ValueError(f"unknown check type {t!r}")
        if not valid:
            rows.append(None)
        elif t == "topk_routing":
            ki, kw = pos[c["ids_output"]], pos[c["weights_output"]]
            per = []
            for j, (outs, ref) in enumerate(valid):
                ins = (inputs or [None] * len(valid))[j]
                if ins is None or c["gating_input"] not in ins:
                    raise ValueError(f"no inputs kept for the top-k routing check of `{c['ids_output']}`")
                bias = ins[c["bias_input"]] if c.get("bias_input") is not None else None
                per.append(_topk_round(outs[ki].to(dev), outs[kw].to(dev), ref[ki].to(dev), ref[kw].to(dev),
                                       ins[c["gating_input"]], bias, c))
            rows.append(torch.stack(per))
        else:
            k = pos[c["output"]]
            o = _rows([outs[k].to(dev) for outs, _ in valid])
            r = _rows([ref[k].to(dev) for _, ref in valid])
            rows.append(_CHECKS[t][0](o, r, c))
    widths = [0 if x is None else x.shape[1] for x in rows]
    present = [x for x in rows if x is not None]
    host = torch.cat(present, dim=1).tolist() if present else [[] for _ in valid]
    results = []
    for j in range(len(valid)):
        res = {"max_abs": 0.0, "max_rel": 0.0, "matched_ratio": 1.0, "has_nan": False, "has_inf": False, "checks": []}
        fail = None
        at = 0
        for i, (c, width) in enumerate(zip(checks, widths)):
            ok, figs, why = _CHECKS[c["type"]][1](c, host[j][at:at + width])
            at += width
            outputs = [c["ids_output"], c["weights_output"]] if c["type"] == "topk_routing" else [c["output"]]
            res["checks"].append({"index": i, "type": c["type"], "outputs": outputs, "passed": ok, "rounds": 1, **figs})
            if c["type"] == "numeric":
                res["max_abs"] = max(res["max_abs"], figs["max_absolute_error"])
                res["max_rel"] = max(res["max_rel"], figs["max_relative_error"])
                res["has_nan"] |= figs["has_nan"]
                res["has_inf"] |= figs["has_inf"]
            if "matched_ratio" in figs:
                res["matched_ratio"] = min(res["matched_ratio"], figs["matched_ratio"])
            if not ok and fail is None:
                fail = f"checks[{i}] ({c['type']}): {why}"
        res["status"] = "INCORRECT_NUMERICAL" if fail else "PASSED"
        if fail:
            res["message"] = fail
            res["reason"] = "numerical_mismatch"
        results.append(res)
        if fail:
            return results
    if stop is not None:
        results.append(stop)
    return results


def op_prepare_rounds(req):
    """Prepares several correctness rounds in one request (`rounds`: one `prepare` request each),
    so a workload's rounds cost a few parent round trips, not three per round. `replies` holds
    one reply per round, in order, ending at the first that failed; every prepared round's
    reference outputs are kept for `check_rounds`, the last round's inputs for timing."""
    kept = {}
    kept_in = {}
    replies = []
    flags = []
    for r in req["rounds"]:
        rep = op_prepare(r, batched=True)
        replies.append(rep)
        if rep.get("result") != "ok":
            break
        kept[int(r["round"])] = STATE["ref_out"]["outputs"]
        kept_in[int(r["round"])] = keep_inputs(r["workload"], STATE["ref_out"]["inputs"])
        flags.append(_nan_everywhere(STATE["ref_out"]["outputs"]))
    ok = [rep for rep in replies if rep.get("result") == "ok"]
    if ok:
        # One wait for every round's reference (an error of its kernels surfaces here), then
        # every NaN-everywhere flag in one read.
        t0 = time.perf_counter()
        try:
            if STATE["device"].type == "cuda":
                torch.cuda.synchronize()
            seen = _read_flags(flags)
        except Exception as e:
            STATE["ref_rounds"] = {}
            return {"result": "ok", "replies": ok[:-1] + [kg.error_reply(
                "invalid_reference", f"the reference failed: {type(e).__name__}: {e}", traceback.format_exc())]}
        ok[-1]["ms"]["reference"] = ok[-1]["ms"].get("reference", 0.0) + (time.perf_counter() - t0) * 1e3
        for j, row in enumerate(seen):
            bad = _nan_reply(row)
            if bad is not None:
                STATE["ref_rounds"] = {}
                return {"result": "ok", "replies": ok[:j] + [bad]}
    STATE["ref_rounds"] = kept
    STATE["ref_round_inputs"] = kept_in
    return {"result": "ok", "replies": replies}


def _read_flags(flags):
    """`flags` (rows of _nan_everywhere's device flags) as rows of bools, in one copy."""
    dev = [f for row in flags for f in row if f is not None]
    host = iter(torch.stack(dev).tolist() if dev else [])
    return [[bool(next(host)) if f is not None else False for f in row] for row in flags]


def _nan_reply(row):
    """The error reply for the first output that is NaN everywhere in `row` (a round's bools,
    one per output, as _read_flags reads them), or None."""
    for n, nan in zip(STATE["definition"]["outputs"], row):
        if nan:
            return kg.error_reply("invalid_reference", f"the reference's output `{n}` is NaN everywhere")
    return None


def op_draws(req):
    """What the candidate draws each of `rounds` from ({spec, seed}, as `prepare` will hand
    it), so the parent can hand a batch to the candidate while this judge prepares it; `draws`
    is None when an input is read from a file (those rounds travel as files)."""
    w = req["workload"]
    spec = random_spec(w, req["input_shapes"], req.get("axes") or {})
    if spec is None:
        return {"result": "ok", "draws": None}
    return {"result": "ok", "draws": [_draw(spec, _round_seed(w, n)) for n in req["rounds"]]}


class HandoverFailed(Exception):
    """The candidate's device pool could not be opened or read; the parent asks for a file."""


def _candidate_outputs(req):
    """The groups of outputs the candidate handed over for `req`: out of its device pool
    (`device`; with `import` set, the parent sent the pool's descriptor on our descriptor
    channel just before) or from the file `path`. Raises HandoverFailed when the pool cannot be
    used, ValueError (or another error) when the outputs cannot be read as such."""
    desc = req.get("device")
    if desc is None:
        return kg.read_outputs(req["path"], STATE["device"])
    dev = STATE["device"]
    try:
        if not isinstance(desc, dict):
            raise kg.kgvmm.VmmError("no description of the device outputs")
        if desc.get("import"):
            old = STATE.pop("pool", None)
            if old is not None:
                old.close()
            fd = kg.CHANNEL[0].recv_fd(10.0)
            try:
                STATE["pool"] = kg.kgvmm.Pool.open(fd, desc.get("size"), dev.index or 0)
            finally:
                os.close(fd)
        pool = STATE.get("pool")
        if pool is None:
            raise kg.kgvmm.VmmError("no pool of the candidate's is open")
        return kg.read_device_outputs(desc, dev, pool)
    except (kg.kgvmm.VmmError, OSError) as e:
        raise HandoverFailed(f"{type(e).__name__}: {e}") from None


def op_check_rounds(req):
    """Compares the candidate's outputs of several rounds (one file of kgcommon.write_outputs: a
    group of outputs per round, in the order of `rounds`) against the kept reference outputs.
    `results` holds one check result per round, ending at the first that did not pass."""
    rounds = [int(r) for r in req["rounds"]]
    kept = STATE.get("ref_rounds") or {}
    missing = [r for r in rounds if r not in kept]
    if missing:
        return kg.error_reply("protocol", f"no reference outputs kept for round(s) {missing}")
    t0 = time.perf_counter()
    try:
        got = _candidate_outputs(req)
    except HandoverFailed as e:
        return {"result": "ok", "handover_failed": str(e)}
    except Exception as e:
        return {"result": "ok", "results": [{"status": "RUNTIME_ERROR", "reason": "outputs_unreadable", "message": f"candidate outputs unreadable: {type(e).__name__}: {e}"}]}
    if not isinstance(got, list) or len(got) != len(rounds):
        n = len(got) if isinstance(got, list) else "no list of"
        return {"result": "ok", "results": [{"status": "RUNTIME_ERROR", "reason": "outputs_missing", "message": f"the candidate handed over {n} round output(s), {len(rounds)} expected"}]}
    t1 = time.perf_counter()
    kept_in = STATE.get("ref_round_inputs") or {}
    results = compare_many([(outs, kept[r]) for r, outs in zip(rounds, got)], req["tolerance"],
                           [kept_in.get(r) for r in rounds])
    return {"result": "ok", "results": results, "ms": {"load": (t1 - t0) * 1e3, "compare": (time.perf_counter() - t1) * 1e3}}


# Reference calls whose host time (until `run` returns, no sync) the judge measures before
# timing, after HOST_PROBE_WARMUP calls (the correctness rounds ran it already): the parent sizes
# the timed calls' spin kernel from it.
HOST_PROBE_CALLS = 4
HOST_PROBE_WARMUP = 1


def reference_host_ms(cupti):
    """Median host time (ms) of the reference's call on the last round's inputs, each call
    launched as a timed call is (kgcommon._time_calls' bracket: a read of the L2 flush buffer,
    a sync, the spin kernel, the start event and marker, then the call), with CUPTI recording
    when the timing will use it (its callbacks lengthen every launch). Calls made back to back
    after a bare sync read 2-3.5x faster than the same calls inside the brackets on an H200
    (gemm down_proj: 33.5 us against 63-115 us), which left the spin too short; this reads
    closer but still low for some (33-74 us), which the spin's 250 us floor (engine.rs) covers.
    None on the CPU or when the reference raises (timing reports that itself)."""
    dev = STATE["device"]
    if dev.type != "cuda" or STATE["ref_out"].get("inputs") is None:
        return None
    fn = STATE["module"].run
    inputs = STATE["ref_out"]["inputs"]
    spin = getattr(torch.cuda, "_sleep", None)
    cycles = int(kg.SPIN_US_DEFAULT * kg.SPIN_CYCLES_PER_US)
    flush = torch.empty(kg.flush_bytes(dev) // 4, dtype=torch.int32, device=dev)
    start = torch.cuda.Event(enable_timing=True)
    recording = bool(cupti) and kg._cupti_start() is None
    times = []
    try:
        for i in range(HOST_PROBE_WARMUP + HOST_PROBE_CALLS):
            args = [_clone(x) for x in inputs]
            flush.sum()
            torch.cuda.synchronize()
            if spin is not None:
                spin(cycles)
            start.record()
            if spin is not None:
                spin(1)
            t0 = time.perf_counter()
            fn(*args)
            if i >= HOST_PROBE_WARMUP:
                times.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
    except Exception:
        return None
    finally:
        del flush
        if recording:
            kg._cupti_stop(keep=False)  # on for its callbacks' cost only
    return statistics.median(times)


def op_prepare_timed(req):
    """Generates distinct input sets for the timed calls (one per timed iteration, within a
    byte budget) and writes them for the candidate. Which timed outputs get checked is decided
    only after timing (op_check_timed), so the candidate cannot tell checked calls apart. The
    reply carries the reference's host launch time (`ref_host_ms`)."""
    reply = _prepare_timed(req)
    if reply.get("result") == "ok":
        reply["ref_host_ms"] = reference_host_ms(req.get("cupti"))
    return reply


def _prepare_timed(req):
    w = req["workload"]
    want = max(1, int(req["iterations"]))
    cap = int(req.get("budget_bytes", 256 << 20))
    spec = random_spec(w, req["input_shapes"], req["axes"]) if req.get("generate") else None
    if spec is not None:
        try:
            return _prepare_generated(w, spec, want, cap)
        except Exception as e:
            return kg.error_reply("invalid_reference", f"failed to generate timed inputs: {type(e).__name__}: {e}", traceback.format_exc())
    sets = []
    sealed = []
    keys = []
    seal_ms = []
    size = 0
    dev = STATE["device"]  # the candidate decrypts on the same kind of device (same RNG)
    try:
        for j in range(want):
            ins = gen_inputs(w, req["input_shapes"], req["axes"], _derive_seed(w["uuid"], j, "timed"))
            # The candidate gets every set sealed (encrypted with its own key, on the device the
            # candidate will decrypt it on) and each key only as its call starts (op_time asks
            # the parent), so no output can be computed ahead of its call.
            key = secrets.randbits(63)
            kg._sync(dev)
            t0 = time.perf_counter()
            enc = [kg.keystream_xor(x.detach().to(dev), key, i) if isinstance(x, torch.Tensor) else x
                   for i, x in enumerate(ins)]
            kg._sync(dev)
            seal_ms.append((time.perf_counter() - t0) * 1e3)
            keys.append(key)
            sealed.append([x.cpu() if isinstance(x, torch.Tensor) else x for x in enc])
            ins = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in ins]
            sets.append(ins)
            size += sum(x.numel() * x.element_size() for x in ins if isinstance(x, torch.Tensor))
            if len(sets) >= 3 and size * (len(sets) + 1) / len(sets) > cap:
                break
    except Exception as e:
        return kg.error_reply("invalid_reference", f"failed to generate timed inputs: {type(e).__name__}: {e}", traceback.format_exc())
    torch.save(sealed, req["path"])
    STATE["timed"] = {"sets": sets, "workload": w}
    # The reference is timed on the very same distinct input sets, so both sides pay the same
    # cache misses (timing it on repeated clones would favour the reference), and opened the
    # same way: sealed, each set decrypted just before its call.
    STATE["timed_ref_sealed"] = (sealed, keys)
    # Keys go to the parent only (the candidate never reads the judge's replies); the sealing
    # times bound the candidate's decryption time inside the dual clock's wall time.
    return {"result": "ok", "count": len(sets), "keys": [str(k) for k in keys], "seal_ms": seal_ms}


def _set_bytes(values):
    return sum(x.numel() * x.element_size() for x in values if isinstance(x, torch.Tensor))


def _prepare_generated(w, spec, want, cap):
    """Timed sets that never travel: each is drawn from its own derived seed, and the seed is
    the key the candidate gets as its call starts (the sealing's just-in-time property, with no
    bytes handed over). Checks that the candidate's generator agrees through a probe seed that
    belongs to no timed set."""
    dev = STATE["device"]
    seeds = [_derive_seed(w["uuid"], j, "timed") for j in range(want)]
    # The probe set (a seed of no timed set) is drawn as a timed set is: its draw time bounds
    # the candidate's per-set draws inside the dual clock, its bytes size the sets.
    probe_seed = _derive_seed(w["uuid"], 0, "probe")
    kg._sync(dev)
    t0 = time.perf_counter()
    probe_set = kg.random_input_set(spec, probe_seed, dev)
    kg._sync(dev)
    gen_ms = (time.perf_counter() - t0) * 1e3
    # One input set is alive at a time (each lives for its call); every call's outputs are kept.
    out_bytes = _set_bytes(STATE["ref_out"].get("outputs") or [])
    count = max(1, min(want, max(3, (cap - _set_bytes(probe_set)) // max(out_bytes, 1))))
    seeds = seeds[:count]
    probe = kg.digest(probe_set)
    del probe_set
    STATE["timed"] = {"seeds": seeds, "spec": spec, "workload": w}
    STATE["timed_ref_sealed"] = ("generate", seeds, spec)
    return {"result": "ok", "count": count, "keys": [str(k) for k in seeds], "seal_ms": [gen_ms] * count,
            "generate": {"spec": spec, "count": count, "probe_seed": str(probe_seed)}, "probe_digest": probe}


def _timed_count(t):
    return len(t["seeds"]) if "seeds" in t else len(t["sets"])


def _timed_set(t, i):
    if "seeds" in t:
        return kg.random_input_set(t["spec"], t["seeds"][i], STATE["device"])
    return t["sets"][i]


def op_sample_timed(req):
    """Picks (secretly, now that timing is over) which timed calls to check."""
    t = STATE.get("timed")
    if not t:
        return kg.error_reply("protocol", "no timed input sets prepared")
    ran = min(int(req["ran"]), _timed_count(t))
    if ran < 1:
        return kg.error_reply("protocol", "no timed call ran")
    k = min(int(req.get("samples", 3)), ran)
    rng = secrets.SystemRandom()
    picked = sorted(rng.sample(range(ran), k))
    t["picked"] = picked
    return {"result": "ok", "indices": picked}


def op_timed_refs(req):
    """Runs the reference on the sampled timed calls' input sets and keeps its outputs for
    check_timed (the parent asks while the candidate saves its timed outputs)."""
    t = STATE.get("timed")
    if not t or "picked" not in t:
        return kg.error_reply("protocol", "no sampled timed calls")
    dev = STATE["device"]
    refs = []
    ins = []
    for i in t["picked"]:
        try:
            x = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in _timed_set(t, i)]
            refs.append(run_reference(x))
            ins.append(keep_inputs(t["workload"], x))
        except Exception as e:
            return kg.error_reply("invalid_reference", f"the reference raised on timed inputs: {type(e).__name__}: {e}", traceback.format_exc())
    t["refs"] = refs
    t["ref_inputs"] = ins
    return {"result": "ok"}


def op_check_timed(req):
    """Checks the sampled timed outputs against the reference's outputs op_timed_refs kept for
    the same inputs."""
    t = STATE.get("timed")
    if not t or "refs" not in t:
        return kg.error_reply("protocol", "no reference outputs kept for sampled timed calls (`timed_refs` first)")
    try:
        got = _candidate_outputs(req)
    except HandoverFailed as e:
        return {"result": "ok", "handover_failed": str(e)}
    except Exception as e:
        return {"result": "ok", "status": "RUNTIME_ERROR", "reason": "outputs_unreadable", "message": f"timed outputs unreadable: {type(e).__name__}: {e}"}
    if not isinstance(got, list) or len(got) != len(t["picked"]):
        return {"result": "ok", "status": "RUNTIME_ERROR", "reason": "outputs_missing", "message": "timed outputs do not match the sampled calls"}
    pairs = []
    for i, outs, ref in zip(t["picked"], got, t["refs"]):
        if not isinstance(outs, list):
            return {"result": "ok", "status": "INCORRECT_NUMERICAL", "reason": "outputs_missing", "message": f"timed call {i}: no outputs kept"}
        pairs.append((outs, ref))
    STATE["timed"] = None
    worst = None
    for i, res in zip(t["picked"], compare_many(pairs, req["tolerance"], t.get("ref_inputs"))):
        res["message"] = f"timed call {i}: " + res.get("message", "")
        if res["status"] != "PASSED":
            return {"result": "ok", **res}
        worst = res if worst is None or res["matched_ratio"] < worst["matched_ratio"] else worst
    return {"result": "ok", **worst, "checked": t["picked"]}


def op_time_reference(req):
    if STATE["ref_out"].get("round") is None:
        return kg.error_reply("protocol", "no prepared inputs to time the reference on")
    inputs = STATE["ref_out"]["inputs"]
    dev = STATE["device"]
    prepared = STATE.pop("timed_ref_sealed", (None, None))
    sealed, keys = prepared[0], prepared[1]
    spec = prepared[2] if sealed == "generate" else None

    def same_kind(ins):
        # Only the current workload's sets: same arity, and every tensor of the same shape/dtype.
        return len(ins) == len(inputs) and all(
            (not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor))
            or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype)
            for a, b in zip(ins, inputs))

    fn = STATE["module"].run
    warmup = int(req["warmup"])
    iterations = int(req["iterations"])
    if spec is not None or (sealed and all(same_kind(ins) for ins in sealed)):
        # Timed exactly as the candidate was: warm-up on the last round's inputs, then one call
        # per distinct timed set, as many calls as the candidate made (never a set twice, never
        # a warmed-up set), so neither side is timed on inputs the other had hot in a cache.
        if spec is not None:
            sets = None
            n = max(1, min(iterations, len(keys)))
        else:
            sets = [[x.to(dev) if isinstance(x, torch.Tensor) else x for x in ins] for ins in sealed]
            sets = sets[: max(1, min(iterations, len(sets)))]
            n = len(sets)
        warm = [_clone(x) for x in inputs]
        try:
            warm_ms = kg.warm_up(lambda: fn(*warm), dev, warmup, req.get("budget_s"))
        except Exception as e:
            return kg.error_reply("invalid_reference", f"the reference raised while warming up: {type(e).__name__}: {e}", traceback.format_exc())
        warmup, iterations = 0, n
        # Outputs are copied into preallocated buffers after each call and dropped, exactly as
        # the candidate's are, so both sides' allocators see the same pattern.
        specs = [{"shape": list(o.shape), "dtype": kg.dtype_name(o.dtype)} for o in STATE["ref_out"]["outputs"]]
        stash = [kg.alloc_like_spec(specs, dev) for _ in range(n)]
        after = lambda a, r: kg.stash_outputs(r, stash[a[1]])  # noqa: E731
    else:
        keys = None
        warm_ms = None  # inside time_calls
        k = max(1, int(req.get("clones", 1)))
        sets = [[_clone(x) for x in inputs] for _ in range(k)]
        after = None
    if keys is None:
        args = [(ins, i) for i, ins in enumerate(sets)]
    elif spec is not None:
        args = kg.SealedSets(None, keys=[int(k) for k in keys], generate=(spec, dev, n))
    else:
        args = kg.SealedSets(sets, keys=keys)
    try:
        t0 = time.perf_counter()
        times, notes = kg.time_calls(lambda a: fn(*a[0]), args, dev, warmup, iterations, req["method"], req.get("budget_s"), after,
                                     req.get("spin_us"))
        batch_wall_ms = (time.perf_counter() - t0) * 1e3
    except Exception as e:
        return kg.error_reply("invalid_reference", f"the reference raised while timed: {type(e).__name__}: {e}", traceback.format_exc())
    # The batch's wall time (trusted: the judge's clock) bounds how much time an honest batch
    # spends outside its calls; the parent's dual clock allows the candidate a multiple of it.
    return {"result": "ok", "times_ms": times, "notes": notes, "spread": kg.summarize(times),
            "batch_wall_ms": batch_wall_ms, "warmup_ms": warm_ms}


def op_clocks(req):
    dev = STATE["device"]
    return {"result": "ok", "clocks": kg.clocks(dev, kg.device_identity(dev))}


if __name__ == "__main__":
    kg.serve({
        "hello": op_hello,
        "setup": op_setup,
        "prepare": op_prepare,
        "prepare_rounds": op_prepare_rounds,
        "draws": op_draws,
        "check_rounds": op_check_rounds,
        "time_reference": op_time_reference,
        "prepare_timed": op_prepare_timed,
        "sample_timed": op_sample_timed,
        "timed_refs": op_timed_refs,
        "check_timed": op_check_timed,
        "clocks": op_clocks,
    })
