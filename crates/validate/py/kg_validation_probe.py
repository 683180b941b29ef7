"""kernelgate validation probe (validator-owned; written by kg-validate-pr at run time).

Loaded before collection as a pytest plugin (``-p kg_validation_probe``) or by
``kg_validation_run.py`` for script targets. It records calls of the watched route
(``module:function``) with ``sys.setprofile`` and the ``--shape-vars`` locals of each call (read
when the call returns, so locals computed in the body count), replaces the parametrize rows of
``--shape-argnames`` with the validator's grid, and writes one receipt per run. The receipt
also lists imports that failed while collecting (test modules, conftest files) or while running
a script, from the exception objects themselves (class name and ``ImportError.name``), so the
validator can name a missing module without reading the log.

With a grid (``KG_VALIDATE_GRID_CELLS``), each route call also records which of its locals hold
values of the grid's coordinates (scalars, tuples such as ``torch.Size``, and ``name.shape`` /
``name.dtype`` of arrays), so the validator can check every grid cell without ``--shape-vars``
and say which locals would have matched when the ``--shape-vars`` tuples do not.

Its configuration is removed from ``os.environ`` before user code runs.
"""

import json
import os
import sys
import threading

_ROUTE = os.environ.pop("KG_VALIDATE_ROUTE", "")
_RECEIPT = os.environ.pop("KG_VALIDATE_RECEIPT", "")
_VARS = [v for v in os.environ.pop("KG_VALIDATE_SHAPE_VARS", "").split(",") if v]
_ARGNAMES = [a for a in os.environ.pop("KG_VALIDATE_GRID_ARGNAMES", "").split(",") if a]
_ROWS = os.environ.pop("KG_VALIDATE_GRID_ROWS", "")
_CELLS = os.environ.pop("KG_VALIDATE_GRID_CELLS", "")
# Distinct per-call observations kept; past this the receipt says it was truncated.
_MAX_OBSERVATIONS = 256

_MOD, _, _FUNC = _ROUTE.partition(":")
_LAST = _FUNC.rsplit(".", 1)[-1]
_state = {
    "calls": 0,
    "shapes": [],
    "symbols": [],
    "grid_replacements": 0,
    "import_errors": [],
    "grid_locals": [],
    "grid_locals_seen": set(),
    "grid_locals_truncated": False,
    "written": False,
}
_lock = threading.Lock()


def _fmt(v):
    if isinstance(v, (tuple, list)):  # torch.Size too
        return ",".join(_fmt(i) for i in v)
    s = str(v)
    if s.startswith("torch."):
        s = s[len("torch."):]
    return s


# The same dtype spellings as the validator's `shapes::normalize_token`, so a local is kept
# exactly when the validator could match it.
_ALIASES = {
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "f64": "float64", "fp64": "float64", "double": "float64",
    "i32": "int32", "i64": "int64",
}


def _norm(tok):
    t = tok.strip().strip("'\"")
    for p in ("torch.", "tl."):
        if t.startswith(p):
            t = t[len(p):]
    return _ALIASES.get(t, t)


def _grid_tokens():
    try:
        cells = json.loads(_CELLS) if _CELLS else []
    except ValueError:
        return set()
    return {_norm(t) for c in cells for t in str(c).split(",") if _norm(t)}


_TOKENS = _grid_tokens()
_SCALARS = (int, float, str, bool)


def _shape_like(name, v, out):
    """Adds ``name → formatted value`` for values that can hold grid coordinates."""
    if isinstance(v, _SCALARS):
        out[name] = _fmt(v)
    elif isinstance(v, (tuple, list)):  # torch.Size is a tuple
        if 0 < len(v) <= 16 and all(isinstance(i, _SCALARS) for i in v):
            out[name] = _fmt(v)
    else:
        mod = type(v).__module__ or ""
        if mod.startswith(("torch", "numpy")):
            if mod.startswith("torch") and type(v).__name__ == "dtype":
                out[name] = _fmt(v)
                return
            shape = getattr(v, "shape", None)
            if isinstance(shape, tuple) and 0 < len(shape) <= 16:
                out[name + ".shape"] = _fmt(tuple(int(i) for i in shape))
                dt = getattr(v, "dtype", None)
                if dt is not None:
                    out[name + ".dtype"] = _fmt(dt)


def _observe(loc):
    """Records the locals of one route call whose every token is a grid coordinate."""
    found = {}
    for name, v in list(loc.items()):
        try:
            _shape_like(name, v, found)
        except Exception:  # a local's odd __str__ must not break the target
            continue
    kept = {k: v for k, v in found.items()
            if v and all(_norm(t) in _TOKENS for t in v.split(","))}
    if not kept:
        return
    key = tuple(sorted(kept.items()))
    if key in _state["grid_locals_seen"]:
        return
    if len(_state["grid_locals"]) >= _MAX_OBSERVATIONS:
        _state["grid_locals_truncated"] = True
        return
    _state["grid_locals_seen"].add(key)
    _state["grid_locals"].append(kept)


_MISSING = object()


def _var(loc, name):
    """A ``--shape-vars`` entry: a local, or ``local.shape`` / ``local.dtype`` (the spellings
    the grid-locals record suggests); only those two attributes, so no property runs."""
    base, _, attr = name.partition(".")
    if base not in loc:
        return _MISSING
    v = loc[base]
    if not attr:
        return v
    if attr not in ("shape", "dtype"):
        return _MISSING
    got = getattr(v, attr, _MISSING)
    if attr == "shape" and got is not _MISSING:
        try:
            got = tuple(int(i) for i in got)
        except Exception:
            return _MISSING
    return got


def _prof(frame, event, arg):
    if event != "return":
        return
    code = frame.f_code
    if code.co_name != _LAST:
        return
    if frame.f_globals.get("__name__") != _MOD:
        return
    if getattr(code, "co_qualname", code.co_name) != _FUNC:
        return
    loc = frame.f_locals
    with _lock:
        _state["calls"] += 1
        if _ROUTE not in _state["symbols"]:
            _state["symbols"].append(_ROUTE)
        vals = [_var(loc, v) for v in _VARS]
        if _VARS and all(v is not _MISSING for v in vals):
            shape = ",".join(_fmt(v) for v in vals)
            if shape not in _state["shapes"]:
                _state["shapes"].append(shape)
        if _TOKENS:
            _observe(loc)


def _import_error_in(exc):
    """The first ImportError in ``exc``'s chain (pytest wraps it in a CollectError or a
    ConftestImportFailure)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ImportError):
            return exc
        exc = exc.__cause__ or getattr(exc, "cause", None) or exc.__context__
    return None


def record_import_error(exc, path, during):
    """Records a failed import (``during``: collection, conftest or script); other exceptions
    are ignored."""
    e = _import_error_in(exc)
    if e is None:
        return
    name = getattr(e, "name", None)
    with _lock:
        _state["import_errors"].append({
            "exception": type(e).__name__,
            "module": name if isinstance(name, str) and name else None,
            "path": str(path),
            "during": during,
        })


def install():
    if _ROUTE:
        sys.setprofile(_prof)
        threading.setprofile(_prof)


def write_receipt():
    if not _RECEIPT or _state["written"]:
        return
    _state["written"] = True
    doc = {
        "schema_version": 1,
        "producer": "kernelgate.validation_probe",
        "route": _ROUTE,
        "kernel_symbols": list(_state["symbols"]),
        "executed_shapes": list(_state["shapes"]),
        "calls": _state["calls"],
        "grid_replacements": _state["grid_replacements"],
        "import_errors": list(_state["import_errors"]),
        "grid_locals": list(_state["grid_locals"]),
        "grid_locals_truncated": _state["grid_locals_truncated"],
    }
    tmp = _RECEIPT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, _RECEIPT)


# --- pytest plugin hooks -------------------------------------------------------------------

def pytest_configure(config):
    install()


def pytest_unconfigure(config):
    write_receipt()


def pytest_exception_interact(node, call, report):
    # Called for collection errors too (CollectReport); test-call errors are not imports.
    if getattr(report, "when", None) != "collect" or call.excinfo is None:
        return
    record_import_error(call.excinfo.value, getattr(node, "nodeid", "") or node.path, "collection")


def _names(argnames):
    if isinstance(argnames, str):
        return [n.strip() for n in argnames.split(",") if n.strip()]
    return list(argnames)


try:
    import pytest as _pytest

    @_pytest.hookimpl(tryfirst=True)
    def pytest_generate_tests(metafunc):
        if not _ARGNAMES:
            return
        rows = json.loads(_ROWS or "[]")
        for node in metafunc.definition.listchain():
            marks = getattr(node, "own_markers", None)
            if not marks:
                continue
            for i, m in enumerate(list(marks)):
                if m.name != "parametrize" or not m.args:
                    continue
                names = _names(m.args[0])
                if sorted(names) != sorted(_ARGNAMES):
                    continue
                order = [_ARGNAMES.index(n) for n in names]
                values = []
                for r in rows:
                    vals = [r[j] if j < len(r) else None for j in order]
                    values.append(vals[0] if len(names) == 1 else tuple(vals))
                marks[i] = _pytest.mark.parametrize(m.args[0], values).mark
                _state["grid_replacements"] += 1

    @_pytest.hookimpl(wrapper=True)
    def pytest_load_initial_conftests(early_config, parser, args):
        # A conftest that fails to import stops pytest before pytest_configure: record it and
        # write the receipt here, as pytest_unconfigure will not run.
        try:
            return (yield)
        except BaseException as e:
            record_import_error(e, getattr(e, "path", ""), "conftest")
            write_receipt()
            raise
except ImportError:  # script targets need no pytest
    pass
