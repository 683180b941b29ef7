"""The judge's comparison of candidate outputs with the reference's (embedded in kg-exec):
per-output tolerances, and the checks of a v2 workload (numeric, exact, code distance, top-k
routing), for many rounds at once on the device. Trusted code only: the judge's."""

import math

import torch

import kg_handover
import kg_inputs


def _invalid(outs, ref, names):
    """Why `outs` cannot be compared with `ref` (outputs `names`) at all (count, type, shape,
    dtype), or None."""
    if not isinstance(outs, list) or len(outs) != len(names):
        n = len(outs) if isinstance(outs, list) else "a non-list"
        return {"status": "INCORRECT_SHAPE", "reason": "output_count", "message": f"the candidate returned {n} output(s), expected {len(names)} ({', '.join(names)})"}
    for n, o in zip(names, outs):
        if isinstance(o, str) and o.startswith("kg:reward_hack:"):
            return {"status": "REWARD_HACK", "reason": "output_subclass", "message": f"output `{n}` is a torch.Tensor subclass ({o[len('kg:reward_hack:'):]}); only plain torch.Tensor outputs are accepted"}
    for n, o, r in zip(names, outs, ref):
        if type(o) is not torch.Tensor and not isinstance(o, kg_handover.ForeignTensor):
            return {"status": "INCORRECT_SHAPE", "reason": "output_not_tensor", "message": f"output `{n}` is a {type(o).__name__}, expected a torch.Tensor"}
        if o.shape != r.shape:
            return {"status": "INCORRECT_SHAPE", "reason": "output_shape", "message": f"output `{n}` has shape {list(o.shape)}, expected {list(r.shape)}"}
    for n, o, r in zip(names, outs, ref):
        got = o.dtype_name if isinstance(o, kg_handover.ForeignTensor) else kg_inputs.dtype_name(o.dtype)
        if got != kg_inputs.dtype_name(r.dtype):
            return {"status": "INCORRECT_DTYPE", "reason": "output_dtype", "message": f"output `{n}` has dtype {got}, expected {kg_inputs.dtype_name(r.dtype)}"}
    return None


def _comparable(pairs, names):
    """(the pairs before the first that cannot be compared at all, that one's result or None)."""
    valid = []
    for outs, ref in pairs:
        bad = _invalid(outs, ref, names)
        if bad is not None:
            return valid, bad
        valid.append((outs, ref))
    return valid, None


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


def _verdict(res, fail):
    """`res` with its status: PASSED, or INCORRECT_NUMERICAL saying `fail` (why, or None)."""
    res["status"] = "INCORRECT_NUMERICAL" if fail else "PASSED"
    if fail:
        res["message"] = fail
        res["reason"] = "numerical_mismatch"
    return res


def compare_many(pairs, tol, definition, dev, inputs=None):
    """Check results (status + metrics) for (outputs, reference outputs) pairs, in order, ending
    at the first that did not pass. The rounds' elementwise work is done for all pairs at once,
    per output, and every figure comes back in one device-to-host copy: per round and output,
    this was ~40 small kernel launches and a synchronisation (0.8-2.7 ms a round on an H200).
    A v2 workload's `tol` is {"checks": [...]} (compare_checks; `inputs`: per pair, the inputs
    its top-k routing checks score by name)."""
    if "checks" in tol:
        return compare_checks(pairs, tol["checks"], definition, dev, inputs)
    names = list(definition["outputs"].keys())
    atol, rtol = float(tol["max_atol"]), float(tol["max_rtol"])
    need = float(tol["required_matched_ratio"])
    cap = tol.get("max_error_cap")
    allow_ninf = bool(tol.get("allow_negative_inf", False))
    valid, stop = _comparable(pairs, names)
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
        results.append(_verdict(res, fail))
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


def keep_inputs(workload, inputs, definition):
    """{name: value} of the inputs routing_inputs names, from a set in `definition`'s order."""
    want = routing_inputs(workload)
    if not want:
        return None
    order = list(definition["inputs"])
    return {n: inputs[order.index(n)] for n in want}


def compare_checks(pairs, checks, definition, dev, inputs=None):
    """compare_many for a v2 workload: every check of `checks` on every pair (each round runs
    all of them, as the port does), results ending at the first round that did not pass. A
    result holds, per check, what ran and its figures (`checks`), and the merged figures the
    trace's summary fields carry. `inputs[j]`: pair j's routing inputs by name."""
    names = list(definition["outputs"].keys())
    pos = {n: k for k, n in enumerate(names)}
    valid, stop = _comparable(pairs, names)
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
        results.append(_verdict(res, fail))
        if fail:
            return results
    if stop is not None:
        results.append(stop)
    return results
