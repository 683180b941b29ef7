"""Inputs of the judge's and the candidate's calls (embedded in kg-exec): dtypes, random and
generated input sets drawn from a seed, the problem's own input generators, the sealed timed
sets (one key per set, handed out as each call is about to start) and input digests."""

import hashlib
import math

import kg_wire


# Filled in place on first use: its identity never changes (the candidate guards it).
_DTYPES = {}


def torch_dtype(name):
    """Maps a definition dtype name to a torch dtype."""
    import torch

    if not _DTYPES:
        table = {}
        for n in (
            "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
            "float8_e4m3fnuz", "float8_e5m2fnuz", "int64", "int32", "int16", "int8",
            "uint8", "bool",
        ):
            if hasattr(torch, n):
                table[n] = getattr(torch, n)
        if hasattr(torch, "float4_e2m1fn_x2"):
            table["float4_e2m1fn_x2"] = torch.float4_e2m1fn_x2
        _DTYPES.update(table)
    if name not in _DTYPES:
        raise ValueError(f"dtype `{name}` is not supported by this torch build")
    return _DTYPES[name]


def dtype_name(dt):
    """The definition spelling of a torch dtype (`torch.bfloat16` -> `bfloat16`)."""
    return str(dt).replace("torch.", "")


class SealedSets:
    """Timed input sets as the judge sealed them (keystream_xor, one key per set), opened on first
    access: just before the call that uses them, outside its timed span. Opening set i asks the
    parent for key i (an aside; the parent hands each key out once, in order). The judge passes
    its own `keys` and makes the same round trip, so both sides are timed alike. Item i is
    `(inputs, *extras[i], i)`."""

    def __init__(self, sealed, keys=None, extras=None, generate=None):
        # generate = (spec, device, count): no bytes were handed over; set i is drawn from the
        # generator seeded with key i (random_input_set), exactly as the judge drew it.
        self._gen = generate
        self._sealed = None if generate else (sealed if isinstance(sealed, list) else list(sealed))
        self._keys = keys
        self._extras = extras
        self._open = {}

    def __len__(self):
        return int(self._gen[2]) if self._gen else len(self._sealed)

    def __getitem__(self, i):
        a = self._open.get(i)
        if a is None:
            import torch

            r = kg_wire.CHANNEL[0].aside({"op": "timed_key", "index": i})
            if self._keys is not None:
                key = self._keys[i]
            elif "key" in r:
                key = int(r["key"])
            else:
                raise RuntimeError(f"no key for timed input set {i}: {r.get('error', r)}")
            if self._gen is not None:
                spec, dev, _ = self._gen
                ins = random_input_set(spec, key, dev)
                self._open = {}  # a generated set lives for its call only (its memory is reused)
            else:
                ins = [keystream_xor(x, key, j) if isinstance(x, torch.Tensor) else x
                       for j, x in enumerate(self._sealed[i])]
                self._sealed[i] = None
            a = (ins, *(self._extras[i] if self._extras is not None else ()), i)
            self._open[i] = a
        return a


def keystream_xor(t, key, index):
    """t's bytes XOR a keystream from t's device RNG seeded by (key, index), as a contiguous tensor
    of t's dtype and shape. The same call encrypts and decrypts. The judge encrypts each timed
    input set with its own secret key; the candidate gets the key of set i only when call i is
    about to start, so it cannot compute outputs for sets it has not been handed yet."""
    import torch

    b = t.contiguous().reshape(-1).view(torch.uint8)
    n = b.numel()
    g = torch.Generator(device=t.device)
    g.manual_seed((int(key) ^ (int(index) * 0x9E3779B97F4A7C15)) & ((1 << 63) - 1))
    # 32-bit draws: the range stays below 2**32, the path every device's RNG implements.
    ks = torch.randint(-(1 << 31), (1 << 31) - 1, ((n + 3) // 4,), dtype=torch.int32,
                       device=t.device, generator=g).view(torch.uint8)[:n]
    return torch.bitwise_xor(b, ks).view(t.dtype).reshape(t.shape)


_WEIGHT_SUFFIXES = ("_weight", "_weights", "_proj", "_projs", "_proj_weight", "_weight_matrix")


def random_tensor(name, shape, dtype, dev, gen):
    """A random input tensor drawn from generator `gen`. A few input names get a plausible range
    (norm weights near 1, variances positive, rotary tables as cos/sin of an angle, weight
    matrices scaled by 1/sqrt(fan-in)); everything else is standard normal (clamped for fp8),
    uniform bytes, or small integers."""
    import torch

    def randn(shape):
        return torch.randn(shape, dtype=torch.float32, device=dev, generator=gen)

    if dtype.is_floating_point and dtype.itemsize >= 2:
        lname = name.lower()
        base = lname.rstrip("0123456789")
        if base.endswith(("norm_weight", "ln_weight", "layernorm_weight", "gamma")) or base == "norm_weight":
            return (1.0 + 0.1 * randn(shape)).to(dtype)
        if base.endswith(("norm_bias", "beta")):
            return (0.1 * randn(shape)).to(dtype)
        if base in ("rstd", "std", "var", "variance") or base.endswith(("_rstd", "_std", "_var", "_variance")):
            return (randn(shape).abs() + 0.1).to(dtype)
        if base in ("cos", "sin", "cos_cached", "sin_cached", "rope_cos", "rope_sin"):
            t = torch.rand(shape, dtype=torch.float32, device=dev, generator=gen) * (2 * math.pi) - math.pi
            return (torch.cos(t) if "cos" in base else torch.sin(t)).to(dtype)
        if len(shape) >= 2 and (base == "weight" or base.endswith(_WEIGHT_SUFFIXES)):
            fan_in = max(int(shape[-1]), 1)
            return (randn(shape) / math.sqrt(fan_in)).to(dtype)
        return randn(shape).to(dtype)
    if dtype.is_floating_point:  # fp8 and narrower
        if dtype == getattr(torch, "float4_e2m1fn_x2", None):
            return torch.randint(0, 256, shape, dtype=torch.uint8, device=dev, generator=gen).view(dtype)
        return randn(shape).clamp_(-2.0, 2.0).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=dev, generator=gen).to(torch.bool)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=dtype, device=dev, generator=gen)
    lo, hi = (-128, 128) if dtype == torch.int8 else (-1024, 1024)
    return torch.randint(lo, hi, shape, dtype=dtype, device=dev, generator=gen)


def generated_tensor(g, shape, dtype, dev, gen):
    """A `generated` input (workload v2) drawn from generator `gen` as the ROCm port defines its
    distributions: normal, uniform, bernoulli, constant and simplex in float32, then cast to
    `dtype`; integer in [low, high) drawn in `dtype` (`g`'s integer bounds are already
    resolved). An unknown type raises: nothing falls back to another distribution."""
    import torch

    t = g["type"]
    if t == "integer":
        return torch.randint(int(g["low"]), int(g["high"]), shape, dtype=dtype, device=dev, generator=gen)
    if t == "normal":
        v = torch.randn(shape, dtype=torch.float32, device=dev, generator=gen) * float(g["std"]) + float(g["mean"])
    elif t == "uniform":
        v = torch.empty(shape, dtype=torch.float32, device=dev).uniform_(float(g["low"]), float(g["high"]), generator=gen)
    elif t == "bernoulli":
        v = torch.rand(shape, dtype=torch.float32, device=dev, generator=gen) < float(g["probability"])
    elif t == "constant":
        v = torch.full(shape, g["value"], dtype=torch.float32, device=dev)
    elif t == "simplex":
        logits = torch.randn(shape, dtype=torch.float32, device=dev, generator=gen)
        v = torch.softmax(logits / float(g["temperature"]), dim=int(g["axis"]))
    else:
        raise ValueError(f"unknown generator type {t!r}")
    return v.to(dtype)


def random_input_set(spec, seed, dev):
    """One input set from `spec` (per input, in order: {"value": v} for a scalar, else
    {"name", "dtype", "shape"}; shape null = a random 0-d value passed as a Python number), drawn
    from a generator seeded with `seed` on `dev`. The judge and the candidate draw identical sets
    from the same seed on the same device.

    A workload with custom inputs has a dict spec, {"custom": {"source", "entrypoint", "args"},
    "inputs": [...]}: the global RNG is seeded with `seed`, the problem's own input generator
    (`entrypoint` in the reference `source`) called with `args` (axes and scalars), and an input
    {"custom": name} is its `name` entry; random inputs then come from the generator. With
    "names" (a v2 workload, where custom inputs sit beside others), the entry point must return
    exactly those names, as the ROCm port requires. An input with a "generator" is a `generated`
    one (generated_tensor)."""
    import torch

    custom = None
    if isinstance(spec, dict):
        c = spec["custom"]
        fn = custom_entry(c["source"], c["entrypoint"])
        torch.manual_seed(int(seed))  # custom input entry points draw from the global generator
        custom = fn(dict(c["args"]), dev)
        if "names" in c:
            got = set(custom) if isinstance(custom, dict) else None
            if got != set(c["names"]):
                raise ValueError(f"custom_inputs_entrypoint returned {sorted(got) if got is not None else type(custom).__name__}, expected exactly {sorted(c['names'])}")
        spec = spec["inputs"]
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    out = []
    for s in spec:
        if "value" in s:
            out.append(s["value"])
        elif "custom" in s:
            v = custom[s["custom"]]
            out.append(v.to(dev) if isinstance(v, torch.Tensor) else v)
        elif "generator" in s:
            shape = () if s.get("shape") is None else tuple(s["shape"])
            v = generated_tensor(s["generator"], shape, torch_dtype(s["dtype"]), dev, gen)
            out.append(v.item() if s.get("shape") is None else v)
        elif s.get("shape") is None:
            out.append(random_tensor(s["name"], (), torch_dtype(s["dtype"]), dev, gen).item())
        else:
            out.append(random_tensor(s["name"], tuple(s["shape"]), torch_dtype(s["dtype"]), dev, gen))
    return out


# Modules built from reference sources for their input generators, by source hash.
CUSTOM_MODULES = {}


def custom_module(source, module=None):
    """The module of a reference `source` (compiled once per process; `module`, when given, is
    registered as it: the judge's own reference module)."""
    import types

    key = hashlib.sha256(source.encode()).hexdigest()
    if module is not None:
        CUSTOM_MODULES[key] = module
    mod = CUSTOM_MODULES.get(key)
    if mod is None:
        mod = types.ModuleType(f"kg_inputs_{key[:12]}")
        exec(compile(source, f"<reference inputs {key[:12]}>", "exec"), mod.__dict__)
        CUSTOM_MODULES[key] = mod
    return mod


def custom_entry(source, entrypoint):
    """The custom input entry point `entrypoint` of a reference `source`."""
    fn = getattr(custom_module(source), entrypoint, None)
    if not callable(fn):
        raise RuntimeError(f"the reference defines no callable custom_inputs_entrypoint `{entrypoint}`")
    return fn


def code_names(fn, depth=3):
    """Every callable module attribute a function can reach by the names its code (and the code
    of its module's functions it calls, `depth` deep) uses, through the modules in its globals:
    {(module name, attribute): (module, object)}. The candidate guards what a problem's own
    input generator calls, as it guards what its own draws call."""
    import types

    names, seen, todo = set(), set(), [(fn, 0)]
    glb = getattr(fn, "__globals__", {})
    while todo:
        f, d = todo.pop()
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        stack = [code]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        if d < depth:
            todo += [(glb[n], d + 1) for n in code.co_names if isinstance(glb.get(n), types.FunctionType)]
    out = {}
    mods = {m.__name__: m for m in glb.values() if isinstance(m, types.ModuleType)}
    done = set()
    for _ in range(depth):
        nxt = {}
        for mname, m in mods.items():
            done.add(mname)
            for n in names:
                v = getattr(m, n, None)
                if isinstance(v, types.ModuleType):
                    if v.__name__ not in done:
                        nxt[v.__name__] = v
                elif v is not None and callable(v):
                    out[(mname, n)] = (m, v)
        mods = nxt
    return out


# Tensors above this many bytes are digested through DIGEST_CHUNKS evenly spaced chunks of
# DIGEST_CHUNK bytes, gathered on their device.
DIGEST_FULL_BYTES = 1 << 20


DIGEST_CHUNKS = 8192


DIGEST_CHUNK = 64


def digest(values):
    """SHA-256 over the bytes of every tensor (and the repr of everything else) in `values`.

    It only tells whether two sides drew the same values (a generator that differs changes
    every byte), so a large tensor is digested through a 512 KiB sample gathered on its device:
    hashing all 64 MiB of a 4096^2 input pair on the host took ~150 ms a side on an H200
    machine. A side that lies about its digest gains nothing: the judge compares against its
    own reference on its own inputs."""
    import torch

    h = hashlib.sha256()
    for v in values:
        if isinstance(v, torch.Tensor):
            b = v.detach().reshape(-1).contiguous().view(torch.uint8)
            n = b.numel()
            if n > DIGEST_FULL_BYTES:
                b = _digest_sample(b)
            h.update(f"{v.dtype}{tuple(v.shape)}".encode())
            h.update(b.cpu().numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


def _digest_sample(b):
    """DIGEST_CHUNKS chunks of the bytes `b` (1-d uint8, more than DIGEST_FULL_BYTES) at an even
    stride, the first at byte 0 and the last ending at the last byte, gathered by copies alone:
    an index gather's first use in a process loaded its kernels lazily, 50-70 ms on an H200."""
    import torch

    n = b.numel()
    stride = (n - DIGEST_CHUNK) // (DIGEST_CHUNKS - 1)
    out = torch.empty(DIGEST_CHUNKS * DIGEST_CHUNK, dtype=torch.uint8, device=b.device)
    rows = DIGEST_CHUNKS - 1
    out[:-DIGEST_CHUNK].view(rows, DIGEST_CHUNK).copy_(b.as_strided((rows, DIGEST_CHUNK), (stride, 1)))
    out[-DIGEST_CHUNK:].copy_(b[n - DIGEST_CHUNK:])
    return out
