"""kernelgate judge worker (trusted code only; embedded in kg-exec).

Generates inputs from workloads with a secret per-run seed, runs the reference, keeps its
outputs in memory, compares candidate outputs and decides statuses. It never imports a
candidate's code: candidate outputs arrive as raw bytes behind a header it checks, in the
candidate's device memory pool it copies them out of (`kg_handover.read_device_outputs`) or in a
file (`kg_handover.read_outputs`), never as a pickle.
Correctness rounds come in batches (`prepare_rounds`, `check_rounds`).
"""

import hashlib
import os
import secrets
import statistics
import sys
import time
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kg_wire  # noqa: E402  (first: it completes the import path)
import kg_env  # noqa: E402
import kg_handover  # noqa: E402
import kg_inputs  # noqa: E402
import kg_timing  # noqa: E402

kg_wire.start_parent_watchdog()


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

import judge_compare  # noqa: E402  (imports torch: after the judge is made undumpable)

STATE = {
    "device": torch.device("cpu"),
    "seed": None,
    "definition": None,
    "module": None,
    "ref_out": {},
    "ref_rounds": {},
}


def op_hello(req):
    dev = kg_env.resolve_device(req.get("device", "cpu"))
    kg_env.fast_torch_save()
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return kg_wire.error_reply("device", f"device `{req.get('device')}` requested, but torch reports no CUDA/HIP device")
        if dev.index >= torch.cuda.device_count():
            return kg_wire.error_reply("device", f"device index {dev.index} out of range: torch sees {torch.cuda.device_count()} device(s)")
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
        if req.get("cupti"):
            kg_timing.cupti_warmup(dev)
        kg_handover.output_stage(kg_handover.OUTPUT_STAGE_BYTES, dev)  # pinned once here, not in a workload
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
    return {"result": "ok", "environment": kg_env.environment(dev), "dumpable_off": DUMPABLE_OFF}


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
        return kg_wire.error_reply("reference", f"the reference failed to load: {type(e).__name__}: {e}", traceback.format_exc())
    if not callable(mod.__dict__.get("run")):
        return kg_wire.error_reply("reference", "the reference defines no callable `run`")
    STATE["module"] = mod
    # Custom inputs are drawn through the reference's own module (kg_inputs.random_input_set).
    kg_inputs.custom_module(d["reference"], mod)
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
    """(spec, files): the `kg_inputs.random_input_set` spec of a workload's inputs (random,
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
    out = kg_inputs.random_input_set(spec, seed, STATE["device"])
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
            v = torch.tensor(v, dtype=kg_inputs.torch_dtype(d["outputs"][n]["dtype"]), device=STATE["device"])
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
        if kg_inputs.dtype_name(o.dtype) != spec["dtype"]:
            return f"output `{n}` has dtype {kg_inputs.dtype_name(o.dtype)}, the definition declares {spec['dtype']}"
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
        return kg_wire.error_reply("invalid_reference", f"failed to generate inputs: {type(e).__name__}: {e}", traceback.format_exc())
    spec = random_spec(w, req["input_shapes"], req["axes"]) if req.get("generate") else None
    drawn = None
    if spec is not None:
        # The candidate draws the same inputs from this round's seed; nothing is written.
        drawn = _draw(spec, seed)
    else:
        torch.save([x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs], req["path"])
    t_digest = time.perf_counter()
    ms["inputs"] = (t_digest - t_gen) * 1e3
    digest = kg_inputs.digest(inputs) if drawn is not None and req.get("digest") else None
    try:
        t0 = time.perf_counter()
        ms["digest"] = (t0 - t_digest) * 1e3
        ref = run_reference(inputs, sync=not batched)
        ref_s = time.perf_counter() - t0
    except Exception as e:
        return kg_wire.error_reply("invalid_reference", f"the reference raised: {type(e).__name__}: {e}", traceback.format_exc())
    bad = _check_declared(ref, req["output_shapes"])
    if bad:
        return kg_wire.error_reply("invalid_reference", "the reference's " + bad)
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
                return kg_wire.error_reply("invalid_reference", f"the reference raised on a second input set: {type(e).__name__}: {e}", traceback.format_exc())
            if all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(ref, ref2)):
                return kg_wire.error_reply(
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
        kept_in[int(r["round"])] = judge_compare.keep_inputs(r["workload"], STATE["ref_out"]["inputs"], STATE["definition"])
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
            return {"result": "ok", "replies": ok[:-1] + [kg_wire.error_reply(
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
            return kg_wire.error_reply("invalid_reference", f"the reference's output `{n}` is NaN everywhere")
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
        return kg_handover.read_outputs(req["path"], STATE["device"])
    dev = STATE["device"]
    try:
        if not isinstance(desc, dict):
            raise kg_handover.kgvmm.VmmError("no description of the device outputs")
        if desc.get("import"):
            old = STATE.pop("pool", None)
            if old is not None:
                old.close()
            fd = kg_wire.CHANNEL[0].recv_fd(10.0)
            try:
                STATE["pool"] = kg_handover.kgvmm.Pool.open(fd, desc.get("size"), dev.index or 0)
            finally:
                os.close(fd)
        pool = STATE.get("pool")
        if pool is None:
            raise kg_handover.kgvmm.VmmError("no pool of the candidate's is open")
        return kg_handover.read_device_outputs(desc, dev, pool)
    except (kg_handover.kgvmm.VmmError, OSError) as e:
        raise HandoverFailed(f"{type(e).__name__}: {e}") from None


def op_check_rounds(req):
    """Compares the candidate's outputs of several rounds (one file of kg_handover.write_outputs: a
    group of outputs per round, in the order of `rounds`) against the kept reference outputs.
    `results` holds one check result per round, ending at the first that did not pass."""
    rounds = [int(r) for r in req["rounds"]]
    kept = STATE.get("ref_rounds") or {}
    missing = [r for r in rounds if r not in kept]
    if missing:
        return kg_wire.error_reply("protocol", f"no reference outputs kept for round(s) {missing}")
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
    results = judge_compare.compare_many([(outs, kept[r]) for r, outs in zip(rounds, got)], req["tolerance"],
                                         STATE["definition"], STATE["device"], [kept_in.get(r) for r in rounds])
    return {"result": "ok", "results": results, "ms": {"load": (t1 - t0) * 1e3, "compare": (time.perf_counter() - t1) * 1e3}}


# Reference calls whose host time (until `run` returns, no sync) the judge measures before
# timing, after HOST_PROBE_WARMUP calls (the correctness rounds ran it already): the parent sizes
# the timed calls' spin kernel from it.
HOST_PROBE_CALLS = 4
HOST_PROBE_WARMUP = 1


def reference_host_ms(cupti):
    """Median host time (ms) of the reference's call on the last round's inputs, each call
    launched as a timed call is (kg_timing.EventTimer's bracket: a read of the L2 flush buffer,
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
    cycles = int(kg_timing.SPIN_US_DEFAULT * kg_timing.SPIN_CYCLES_PER_US)
    flush = torch.empty(kg_timing.flush_bytes(dev) // 4, dtype=torch.int32, device=dev)
    start = torch.cuda.Event(enable_timing=True)
    recording = bool(cupti) and kg_timing._cupti_start() is None
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
            kg_timing._cupti_stop(keep=False)  # on for its callbacks' cost only
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
            return kg_wire.error_reply("invalid_reference", f"failed to generate timed inputs: {type(e).__name__}: {e}", traceback.format_exc())
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
            kg_timing._sync(dev)
            t0 = time.perf_counter()
            enc = [kg_inputs.keystream_xor(x.detach().to(dev), key, i) if isinstance(x, torch.Tensor) else x
                   for i, x in enumerate(ins)]
            kg_timing._sync(dev)
            seal_ms.append((time.perf_counter() - t0) * 1e3)
            keys.append(key)
            sealed.append([x.cpu() if isinstance(x, torch.Tensor) else x for x in enc])
            ins = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in ins]
            sets.append(ins)
            size += sum(x.numel() * x.element_size() for x in ins if isinstance(x, torch.Tensor))
            if len(sets) >= 3 and size * (len(sets) + 1) / len(sets) > cap:
                break
    except Exception as e:
        return kg_wire.error_reply("invalid_reference", f"failed to generate timed inputs: {type(e).__name__}: {e}", traceback.format_exc())
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
    kg_timing._sync(dev)
    t0 = time.perf_counter()
    probe_set = kg_inputs.random_input_set(spec, probe_seed, dev)
    kg_timing._sync(dev)
    gen_ms = (time.perf_counter() - t0) * 1e3
    # One input set is alive at a time (each lives for its call); every call's outputs are kept.
    out_bytes = _set_bytes(STATE["ref_out"].get("outputs") or [])
    count = max(1, min(want, max(3, (cap - _set_bytes(probe_set)) // max(out_bytes, 1))))
    seeds = seeds[:count]
    probe = kg_inputs.digest(probe_set)
    del probe_set
    STATE["timed"] = {"seeds": seeds, "spec": spec, "workload": w}
    STATE["timed_ref_sealed"] = ("generate", seeds, spec)
    return {"result": "ok", "count": count, "keys": [str(k) for k in seeds], "seal_ms": [gen_ms] * count,
            "generate": {"spec": spec, "count": count, "probe_seed": str(probe_seed)}, "probe_digest": probe}


def _timed_count(t):
    return len(t["seeds"]) if "seeds" in t else len(t["sets"])


def _timed_set(t, i):
    if "seeds" in t:
        return kg_inputs.random_input_set(t["spec"], t["seeds"][i], STATE["device"])
    return t["sets"][i]


def op_sample_timed(req):
    """Picks (secretly, now that timing is over) which timed calls to check."""
    t = STATE.get("timed")
    if not t:
        return kg_wire.error_reply("protocol", "no timed input sets prepared")
    ran = min(int(req["ran"]), _timed_count(t))
    if ran < 1:
        return kg_wire.error_reply("protocol", "no timed call ran")
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
        return kg_wire.error_reply("protocol", "no sampled timed calls")
    dev = STATE["device"]
    refs = []
    ins = []
    for i in t["picked"]:
        try:
            x = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in _timed_set(t, i)]
            refs.append(run_reference(x))
            ins.append(judge_compare.keep_inputs(t["workload"], x, STATE["definition"]))
        except Exception as e:
            return kg_wire.error_reply("invalid_reference", f"the reference raised on timed inputs: {type(e).__name__}: {e}", traceback.format_exc())
    t["refs"] = refs
    t["ref_inputs"] = ins
    return {"result": "ok"}


def op_check_timed(req):
    """Checks the sampled timed outputs against the reference's outputs op_timed_refs kept for
    the same inputs."""
    t = STATE.get("timed")
    if not t or "refs" not in t:
        return kg_wire.error_reply("protocol", "no reference outputs kept for sampled timed calls (`timed_refs` first)")
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
    for i, res in zip(t["picked"], judge_compare.compare_many(pairs, req["tolerance"], STATE["definition"], STATE["device"],
                                                                   t.get("ref_inputs"))):
        res["message"] = f"timed call {i}: " + res.get("message", "")
        if res["status"] != "PASSED":
            return {"result": "ok", **res}
        worst = res if worst is None or res["matched_ratio"] < worst["matched_ratio"] else worst
    return {"result": "ok", **worst, "checked": t["picked"]}


def op_time_reference(req):
    if STATE["ref_out"].get("round") is None:
        return kg_wire.error_reply("protocol", "no prepared inputs to time the reference on")
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
            warm_ms = kg_timing.warm_up(lambda: fn(*warm), dev, warmup, req.get("budget_s"))
        except Exception as e:
            return kg_wire.error_reply("invalid_reference", f"the reference raised while warming up: {type(e).__name__}: {e}", traceback.format_exc())
        warmup, iterations = 0, n
        # Outputs are copied into preallocated buffers after each call and dropped, exactly as
        # the candidate's are, so both sides' allocators see the same pattern.
        specs = [{"shape": list(o.shape), "dtype": kg_inputs.dtype_name(o.dtype)} for o in STATE["ref_out"]["outputs"]]
        stash = [kg_handover.alloc_like_spec(specs, dev) for _ in range(n)]
        after = lambda a, r: kg_handover.stash_outputs(r, stash[a[1]])  # noqa: E731
    else:
        keys = None
        warm_ms = None  # inside time_calls
        k = max(1, int(req.get("clones", 1)))
        sets = [[_clone(x) for x in inputs] for _ in range(k)]
        after = None
    if keys is None:
        args = [(ins, i) for i, ins in enumerate(sets)]
    elif spec is not None:
        args = kg_inputs.SealedSets(None, keys=[int(k) for k in keys], generate=(spec, dev, n))
    else:
        args = kg_inputs.SealedSets(sets, keys=keys)
    try:
        t0 = time.perf_counter()
        timer = kg_timing.timer_for(req["method"], dev, warmup, iterations, req.get("budget_s"), req.get("spin_us"))
        times, notes = kg_timing.time_calls(kg_timing.Calls(lambda a: fn(*a[0]), args, after), timer)
        batch_wall_ms = (time.perf_counter() - t0) * 1e3
    except Exception as e:
        return kg_wire.error_reply("invalid_reference", f"the reference raised while timed: {type(e).__name__}: {e}", traceback.format_exc())
    # The batch's wall time (trusted: the judge's clock) bounds how much time an honest batch
    # spends outside its calls; the parent's dual clock allows the candidate a multiple of it.
    return {"result": "ok", "times_ms": times, "notes": notes, "spread": kg_timing.summarize(times),
            "batch_wall_ms": batch_wall_ms, "warmup_ms": warm_ms}


def op_clocks(req):
    dev = STATE["device"]
    return {"result": "ok", "clocks": kg_env.clocks(dev, kg_env.device_identity(dev))}


if __name__ == "__main__":
    kg_wire.serve({
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
