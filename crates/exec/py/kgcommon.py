"""Shared helpers of the kernelgate judge and candidate workers (embedded in kg-exec).

Protocol: the Rust parent hands the worker one end of a socketpair, inherited under the
descriptor number in argv[1] (no filesystem path: nothing another process could bind or connect
to). The worker first sends {"ready": true}, then reads one JSON request per line and answers
each with one JSON line: {"result": "ok", ...} or {"result": "error", "kind": ..., "message": ...},
after any number of asides ({"aside": true, "op": "timed_key", "index": i}, each answered by one
line). The parent parses this envelope strictly and bounds every message (kg-exec's protocol.rs).
Nothing is ever parsed from stdout/stderr: those are captured as the log. A second socket,
inherited under the number in $KG_FD_CHANNEL, carries file descriptors only (device memory
pools, kgvmm), one per one-byte message.
"""

import hashlib
import json
import math
import os
import socket
import statistics
import sys
import threading
import time
import traceback


def _extend_sys_path():
    """Workers start with `-I -S`: no site module, so no start-up code of the interpreter's site
    directories (`.pth` import lines, sitecustomize, usercustomize) runs in them, whatever a
    candidate planted there. kg-exec hands over the import path the site module would have built
    (`KG_SYS_PATH`, a JSON list; path lines of `.pth` files only, nothing executed)."""
    raw = os.environ.pop("KG_SYS_PATH", None)
    if raw:
        for p in json.loads(raw):
            if p not in sys.path:
                sys.path.append(p)


_extend_sys_path()

import kgcupti
import kgvmm

_DTYPES = None


def torch_dtype(name):
    """Maps a definition dtype name to a torch dtype."""
    global _DTYPES
    import torch

    if _DTYPES is None:
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
        _DTYPES = table
    if name not in _DTYPES:
        raise ValueError(f"dtype `{name}` is not supported by this torch build")
    return _DTYPES[name]


def dtype_name(dt):
    """The definition spelling of a torch dtype (`torch.bfloat16` -> `bfloat16`)."""
    return str(dt).replace("torch.", "")


_WATCHDOG = []


def start_parent_watchdog():
    """Kills this worker's whole process group if the parent (kg-exec) goes away.

    The parent's pid comes as argv[2] (so a worker started just as kg-bench died still knows
    whom to watch); it is started before torch is imported.
    """
    if _WATCHDOG:
        return
    if os.getppid() == 0:
        # Process 1 of our own PID namespace (kg-exec's sandbox): the parent is outside it,
        # and the sandbox's relay process kills us when the parent goes away.
        return
    try:
        parent = int(sys.argv[2])
    except (IndexError, ValueError):
        parent = os.getppid()
    if os.getppid() != parent:
        os.killpg(os.getpgrp(), 9)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                try:
                    os.killpg(os.getpgrp(), 9)
                finally:
                    os._exit(70)

    t = threading.Thread(target=watch, name="kg-parent-watchdog", daemon=True)
    t.start()
    _WATCHDOG.append(t)


# The environment variable naming the descriptor channel's number (kg-exec's process.rs).
FD_CHANNEL_ENV = "KG_FD_CHANNEL"


class Channel:
    """JSON-lines over the socket the parent handed down as descriptor `fd`."""

    def __init__(self, fd):
        self.sock = socket.socket(fileno=int(fd))
        # Ours alone: nothing this worker starts inherits it.
        self.sock.set_inheritable(False)
        self.rfile = self.sock.makefile("rb")
        # The second socket the parent handed down at start: file descriptors only
        # (kgvmm pools), one per one-byte message.
        fd = os.environ.pop(FD_CHANNEL_ENV, "")
        self.fds = socket.socket(fileno=int(fd)) if fd.isdigit() else None
        if self.fds is not None:
            self.fds.set_inheritable(False)

    def send_fd(self, fd):
        """Sends descriptor `fd` (still ours to close) to the parent."""
        if self.fds is None:
            raise OSError("the parent handed down no descriptor channel")
        socket.send_fds(self.fds, [b"F"], [fd])

    def recv_fd(self, timeout):
        """The next descriptor the parent sent (ours to close), waiting up to `timeout` s."""
        if self.fds is None:
            raise OSError("the parent handed down no descriptor channel")
        self.fds.settimeout(timeout)
        # Room for one descriptor: the kernel closes any more sent in the same message.
        _, fds, _, _ = socket.recv_fds(self.fds, 1, 1)
        if not fds:
            raise OSError("the parent sent no descriptor")
        return fds[0]

    def recv(self):
        line = self.rfile.readline()
        if not line:
            return None
        return json.loads(line)

    def send(self, obj):
        data = (json.dumps(json_safe(obj), allow_nan=False, default=str) + "\n").encode()
        self.sock.sendall(data)

    def aside(self, obj):
        """Asks the parent something in the middle of answering a request (an `aside` line, one
        reply line back); the request's own reply still comes last."""
        self.send(dict(obj, aside=True))
        r = self.recv()
        if r is None:
            raise ConnectionError("the parent closed the socket during an aside")
        return r


# The channel of the running worker (for asides from inside a request handler).
CHANNEL = []


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

            r = CHANNEL[0].aside({"op": "timed_key", "index": i})
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


_F64_MAX = 1.7976931348623157e308


def json_safe(obj):
    """Replaces non-finite floats (JSON has none) so a reply about garbage outputs stays valid:
    +-inf becomes +-f64::MAX (still "larger than any tolerance"), NaN becomes null."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return _F64_MAX if obj > 0 else -_F64_MAX
        return obj
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


# Characters of an error's message and of its traceback sent at most (head and tail): the parent
# bounds every message (kg-exec's protocol.rs ERROR_TEXT_LIMIT), and a compiler's whole output or
# a deep recursion must not push a legitimate error past it.
ERROR_TEXT_LIMIT = 32 * 1024


def clip_text(text, limit=ERROR_TEXT_LIMIT):
    """`text` (a str) if it is short enough, else its head and tail with a marker between."""
    text = str(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters dropped ...]\n{text[-half:]}"


def error_reply(kind, message, tb=None):
    r = {"result": "error", "kind": kind, "message": clip_text(message)}
    if tb:
        r["traceback"] = clip_text(tb)
    return r


def serve(handlers):
    """Runs the request loop: says it is ready, then dispatches on `op`, answers every request
    once."""
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        sys.stderr.write("usage: worker.py CHANNEL_FD [PARENT_PID]\n")
        sys.exit(2)
    start_parent_watchdog()
    chan = Channel(int(sys.argv[1]))
    CHANNEL.append(chan)
    chan.send({"ready": True})
    while True:
        try:
            req = chan.recv()
        except (ConnectionError, OSError):
            return
        if req is None:
            return
        op = req.get("op")
        if op == "shutdown":
            chan.send({"result": "ok"})
            return
        fn = handlers.get(op)
        if fn is None:
            chan.send(error_reply("protocol", f"unknown op `{op}`"))
            continue
        try:
            reply = fn(req)
        except Exception as e:  # the handler decides statuses; this is a bug or a user error
            reply = error_reply("exception", f"{type(e).__name__}: {e}", traceback.format_exc())
        try:
            chan.send(reply)
        except (ValueError, TypeError) as e:
            chan.send(error_reply("protocol", f"reply not serialisable: {e}"))


def flush_stdio():
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass


# ---------------------------------------------------------------- device and environment


def fast_torch_save():
    """Turns off torch.save's CRC-32 of every byte written: the workers' files never leave this
    machine, torch.load does not check it, and it made saving 95 MiB of outputs 5x slower."""
    import torch

    opt = getattr(torch.serialization, "set_crc32_options", None)
    if opt is not None:
        opt(False)


def resolve_device(name):
    """Maps a worker device name to a torch device. On the CPU, torch uses one thread in every
    worker, so judge and candidate are timed alike and a busy host perturbs them less."""
    import torch

    if name.startswith("cuda") or name.startswith("rocm"):
        idx = int(name.split(":", 1)[1]) if ":" in name else 0
        return torch.device("cuda", idx)
    torch.set_num_threads(1)
    return torch.device("cpu")


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def device_identity(dev):
    """Identity of the device the worker runs on, as a contract DeviceIdentity."""
    import platform

    import torch

    if dev.type == "cpu":
        return {"kind": "cpu", "name": _cpu_model(), "arch": platform.machine()}
    p = torch.cuda.get_device_properties(dev)
    is_hip = getattr(torch.version, "hip", None) is not None
    ident = {
        "kind": "rocm" if is_hip else "cuda",
        "index": dev.index or 0,
        "name": p.name,
        "memory_total_bytes": int(p.total_memory),
    }
    arch = getattr(p, "gcnArchName", None) if is_hip else f"sm_{p.major}{p.minor}"
    if arch:
        ident["arch"] = arch.split(":")[0]
    uuid = getattr(p, "uuid", None)
    if uuid is not None:
        u = str(uuid)
        ident["uuid"] = u if u.startswith("GPU-") or is_hip else "GPU-" + u
    bus = getattr(p, "pci_bus_id", None)
    if bus is not None:
        ident["pci_bus_id"] = "%08x:%02x:%02x.0" % (
            getattr(p, "pci_domain_id", 0), bus, getattr(p, "pci_device_id", 0))
    return ident


def clocks(dev, ident):
    """SM and memory clocks through pynvml when importable; never locked by us."""
    out = {"locked": False}
    if dev.type == "cpu":
        return out
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = None
        bus = ident.get("pci_bus_id")
        if bus:
            try:
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
            except Exception:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)
        out["sm_mhz"] = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        out["mem_mhz"] = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM))
    except Exception:
        pass
    return out


def libs():
    out = {}
    try:
        import torch

        out["torch"] = torch.__version__
        if torch.version.cuda:
            out["cuda"] = torch.version.cuda
        if getattr(torch.version, "hip", None):
            out["hip"] = torch.version.hip
    except Exception:
        pass
    for mod in ("triton", "numpy"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "unknown")
        except Exception:
            pass
    out["python"] = sys.version.split()[0]
    return out


def _nvidia_driver_from_proc(text):
    """The kernel module's version from `/proc/driver/nvidia/version` text ("NVRM version:
    NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..."), or None."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            for word in line.split():
                parts = word.split(".")
                if len(parts) >= 2 and all(p.isdigit() for p in parts):
                    return word
    return None


def driver_version(dev):
    """The GPU driver's version (NVML, else the NVIDIA kernel module's `/proc` file; for ROCm
    the amdgpu module's, unverified on AMD hardware), or None on the CPU or when unreadable."""
    import torch

    if dev.type == "cpu":
        return None
    if getattr(torch.version, "hip", None):
        try:
            with open("/sys/module/amdgpu/version") as f:
                return f.read().strip() or None
        except OSError:
            return None
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            return _nvidia_driver_from_proc(f.read())
    except OSError:
        return None


def environment(dev):
    ident = device_identity(dev)
    hw = "CPU" if dev.type == "cpu" else ident["name"].replace(" ", "_")
    lib = libs()
    drv = driver_version(dev)
    if drv:
        lib["driver"] = drv
    return {"hardware": hw, "libs": lib, "device": ident, "clocks": clocks(dev, ident)}


# ---------------------------------------------------------------- timing


def summarize(times_ms):
    s = sorted(times_ms)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) >= 2 else [s[0]] * 3
    return {
        "min_ms": s[0],
        "p25_ms": q[0],
        "median_ms": statistics.median(s),
        "p75_ms": q[2],
        "max_ms": s[-1],
        "mean_ms": statistics.fmean(s),
    }


def _sync(dev):
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_calls(call, arg_sets, dev, warmup, iterations, method, budget_s=None, after=None, spin_us=None):
    """_time_calls with Python's cyclic garbage collector off (as timeit does), on both sides
    alike: a collection set off by the harness's own allocations between calls could otherwise
    land inside a call's host launch and make it late for its spin."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        return _time_calls(call, arg_sets, dev, warmup, iterations, method, budget_s, after, spin_us)
    finally:
        if was:
            gc.enable()


def _time_calls(call, arg_sets, dev, warmup, iterations, method, budget_s=None, after=None, spin_us=None):
    """Times `call(args)` over rotating argument sets.

    `spin_us` (GPU): the length of the spin kernel queued before each call (default
    SPIN_US_DEFAULT); the parent sizes it from the reference's host launch time.

    `after(args, result)`, when given, runs after each timed call, outside the timed span (not
    for cuda_graph): the candidate stashes a copy of its outputs there and drops the originals,
    so its next call reuses that memory just as a reference whose outputs are dropped does.

    cpu_wall: perf_counter around each synchronous call.
    cupti: as device_event_sync, with CUPTI recording every device activity (kgcupti);
      notes["cupti_ms"] gets each call's device span (cupti_spans), or notes["cupti_fallback"]
      says why not. The returned times are the event times either way.
    device_event_sync: per iteration an L2 flush (a read, leaving L2 clean), a device-wide sync,
      a short spin kernel (so the start event and the call are queued before the GPU reaches
      them), a start event, a one-cycle start marker, the call, a device-wide sync (so work on
      any stream is finished), an end event. The fixed cost of the
      bracket (same sequence, the call replaced by host busy time as long as the calls' median
      host time, capped below the spin) is measured the same way and subtracted.
    cuda_graph: the call captured once in a CUDA graph (several unrolled launches), replayed;
      per-launch time. No L2 flush: for launch-bound kernels only.
    notes["timed_index"] gets, per sample, the index of the argument set its call used (set 0 for
    every graph replay): the parent requires one sample per timed set whose key it handed out,
    sets 0..n-1 in order, so samples added from inside a call are caught.
    Returns (times_ms list, notes dict).
    """
    import torch

    n = len(arg_sets)
    notes = {}
    if dev.type == "cpu" or method == "cpu_wall":
        t_start = time.perf_counter()
        for i in range(warmup):
            call(arg_sets[i % n])
            if budget_s is not None and time.perf_counter() - t_start > budget_s / 4:
                break
        times = []
        index = []
        t_start = time.perf_counter()
        for i in range(iterations):
            args = arg_sets[i % n]
            t0 = time.perf_counter()
            r = call(args)
            _sync(dev)
            times.append((time.perf_counter() - t0) * 1e3)
            index.append(i % n)
            if after is not None:
                after(args, r)
            del r
            if budget_s is not None and len(times) >= 3 and time.perf_counter() - t_start > budget_s:
                break
        notes["timed_index"] = index
        return times, notes

    with torch.cuda.device(dev):
        if method == "cuda_graph":
            unroll = 10
            args = arg_sets[0]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(max(warmup, 1)):
                    call(args)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(unroll):
                    call(args)
            torch.cuda.synchronize()
            g.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(iterations):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / unroll)
            notes["graph_unroll"] = unroll
            notes["timed_index"] = [0] * len(times)
            return times, notes

        # device_event_sync
        flush = torch.zeros(flush_bytes(dev) // 4, dtype=torch.int32, device=dev)
        for i in range(warmup):
            call(arg_sets[i % n])
        torch.cuda.synchronize()

        # A short spin kernel queued before the start event keeps the GPU busy while the host
        # records the start event and launches the call, so host launch latency is not counted
        # (nvbench's blocking-kernel idea). Its length is `spin_us`.
        spin = getattr(torch.cuda, "_sleep", None)
        notes["launch_gap_hidden"] = spin is not None
        spin_us = float(spin_us) if spin_us else SPIN_US_DEFAULT
        spin_cycles = int(spin_us * SPIN_CYCLES_PER_US)
        notes["spin_us"] = spin_us
        # Host time per part of the bracket (ms): where a workload's timing time goes.
        cost = {"pre": [], "post": []}

        def bracket(fn, count, post=None, mark=False, pre=None, host=None, cycles=spin_cycles, flushed=True):
            # host, when given, gets each call's host time until it returns (its launch time).
            # Returns (bracket times, stream times): the latter end at an event recorded on the
            # current stream as the call returns, with no host sync in between.
            paused = False
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
            mids = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
            for i in range(count):
                if pre is not None:
                    p0 = time.perf_counter()
                    pre(i)  # e.g. decrypting call i's inputs: before the flush, never timed
                    cost["pre"].append((time.perf_counter() - p0) * 1e3)
                if flushed:
                    # Read, not written: a flush that writes leaves L2 full of dirty lines, and
                    # the call pays for writing them back as it evicts them (on an H200 a 1M add
                    # read 4.9 us with 4.3 MB of such write-backs, 4.1 us after a read flush;
                    # ncu's own flush leaves L2 clean). The previous call's outputs are written
                    # back here, outside the timing.
                    flush.sum()
                torch.cuda.synchronize()
                if spin is not None:
                    if paused:
                        kgcupti.RECORDER.resume()
                    spin(cycles)
                starts[i].record()
                if spin is not None:
                    # The start marker: a CUPTI span begins as it ends, so the call's first
                    # kernel pays the GPU front-end's launch gap as each later kernel of a call
                    # does (~1 us on an H200, what ncu's gpu__time_duration counts too), and not
                    # the start event's ~1.4 us, which lies before it.
                    spin(1)
                h0 = time.perf_counter()
                r = fn(i)
                if host is not None:
                    host.append((time.perf_counter() - h0) * 1e3)
                mids[i].record()
                torch.cuda.synchronize()
                ends[i].record()
                if mark:
                    spin(1)  # closes this call's CUPTI records before our own copies in `post`
                    # Off until the next call's spin: the stash copy, the next set's draw and
                    # the flush make no records (a third of them, for a one-kernel call).
                    kgcupti.RECORDER.pause()
                    paused = True
                if post is not None:
                    p0 = time.perf_counter()
                    post(i, r)
                    cost["post"].append((time.perf_counter() - p0) * 1e3)
                del r
            if paused:
                kgcupti.RECORDER.resume()  # the calibration brackets run under the same recording
            torch.cuda.synchronize()
            return ([s.elapsed_time(e) for s, e in zip(starts, ends)],
                    [s.elapsed_time(m) for s, m in zip(starts, mids)])

        post = (lambda i, r: after(arg_sets[i % n], r)) if after is not None else None
        recording = False
        t0 = time.perf_counter()
        if method == "cupti":
            why = _cupti_start()
            if why:
                notes["cupti_fallback"] = why
            recording = why is None
        t1 = time.perf_counter()
        # The bracket's own cost (subtracted from the event times) is measured after the timed
        # calls, under the same recording (CUPTI's callbacks lengthen every launch, record and
        # sync), by brackets whose "call" keeps the host busy as long as the timed calls' median
        # host time (never longer than most of the spin), so the host reaches the closing sync
        # at the same point of the spin as in a timed call. (On an H200 this did not remove the
        # 5-50 us by which the brackets of us kernels exceed their spans: that lies in the
        # closing sync, hence the stream events below.) Their spins come last in the records
        # (left out when the records are split, below).
        host = []
        try:
            raw, raw_stream = bracket(lambda i: call(arg_sets[i % n]), iterations, post,
                                      mark=recording and spin is not None, pre=lambda i: arg_sets[i % n], host=host)
            t3 = time.perf_counter()
            busy_s = min(statistics.median(host), CALIBRATION_SPIN_SHARE * spin_us / 1e3) / 1e3
            # What is measured starts as the spin ends, so the calibration's spin need only
            # outlast its host busy time (no flush either: it comes before the first sync);
            # a 600 us spin for host-bound references made the calibration a fifth of the
            # workload's harness time (H200, session 9).
            cal_us = min(spin_us, busy_s * 1e6 + CALIBRATION_SPIN_MARGIN_US)
            empty, empty_stream = bracket(lambda i: _busy_wait(busy_s), CALIBRATION_BRACKETS,
                                          cycles=int(cal_us * SPIN_CYCLES_PER_US), flushed=False)
            overhead = statistics.median(empty)
        finally:
            t4 = time.perf_counter()
            events, lost = _cupti_stop() if recording else (None, None)
        notes["bracket_overhead_ms"] = overhead
        notes["raw_median_ms"] = statistics.median(raw)
        # The current stream's share of the bracket, without the closing sync and its wake-up
        # (on an H200 the bracket times of us kernels ran 5-50 us over their CUPTI spans, more
        # with more kernels, so they could not check those spans): what engine.rs checks the
        # spans against.
        notes["stream_event_median_ms"] = max(statistics.median(raw_stream) - statistics.median(empty_stream), 0.0)
        # Host time per call against the spin that should hide it: when the host takes longer,
        # the CUPTI span counts the wait (bimodal small-kernel timings).
        notes["host_call_ms"] = {"median": statistics.median(host), "max": max(host)}
        t5 = time.perf_counter()
        if lost:
            notes["cupti_fallback"] = lost
        elif events is not None:
            late = []
            # One pass over the records for both readings (thousands of records a workload).
            parsed = _activities_and_spins(events, trailing=CALIBRATION_BRACKETS * SPINS_PER_CALIBRATION)
            spans, why = cupti_spans(events, len(raw), spin is not None, late, parsed=parsed)
            if spans is None:
                notes["cupti_fallback"] = why
            else:
                notes["cupti_ms"] = spans
                notes["cupti_kernels"] = cupti_call_kernels(events, parsed=parsed)
                # Calls whose first kernel started after the spin had ended: the host took
                # longer than the spin to launch it, and the wait counts in the span.
                notes["late_first_start_calls"] = late[0] if late else 0
        med = lambda v: round(statistics.median(v), 4) if v else None  # noqa: E731
        notes["bracket_ms"] = {"cupti_start": round((t1 - t0) * 1e3, 3), "calls": round((t3 - t1) * 1e3, 3),
                               "calibration": round((t4 - t3) * 1e3, 3), "cupti_stop": round((t5 - t4) * 1e3, 3),
                               "cupti_decode": round(kgcupti.RECORDER.last_decode_ms, 3) if recording else None,
                               "cupti_parse": round((time.perf_counter() - t5) * 1e3, 3),
                               "pre_median": med(cost["pre"]), "post_median": med(cost["post"])}
        del flush
        notes["timed_index"] = [i % n for i in range(len(raw))]
        return [max(t - overhead, 0.0) for t in raw], notes


def flush_bytes(dev):
    """The size of the buffer read before each timed call to flush L2 (at least twice L2)."""
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    return max(256 * 1024 * 1024, 2 * l2)


# The spin kernel before each timed call, unless the parent sizes it (time_calls' spin_us):
# longer than the host needs to record the start event and launch a small call.
SPIN_US_DEFAULT = 250.0  # engine.rs SPIN_MIN_US
# torch.cuda._sleep counts clock cycles; ~2 GHz on the GPUs we target (an H200 runs at 1980 MHz).
SPIN_CYCLES_PER_US = 2_000

# Brackets measured to subtract the bracket's own cost from event times (time_calls). Three,
# not five: each costs the reference's host launch again (0.5-0.7 ms for attention references,
# twice per workload), and CUPTI spans, not event times, are what is reported.
CALIBRATION_BRACKETS = 3
# Their host busy time is the timed calls' median host time, at most this share of the spin.
CALIBRATION_SPIN_SHARE = 0.8
# Their spin outlasts that busy time by this much (never longer than the timed calls' spin).
CALIBRATION_SPIN_MARGIN_US = 100.0


def _busy_wait(seconds):
    """Keeps the host busy (not asleep: a sleeping thread wakes late) for `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# A call whose first activity starts more than this long after the start marker ends was not
# queued behind it: host work inside the call kept the GPU idle (counted, and reported as late).
CUPTI_QUEUE_GAP_NS = 5_000
# Spin kernels per timed call under CUPTI (the spin, the start marker, the one-cycle spin that
# closes it) and per calibration bracket (the spin and the start marker).
SPINS_PER_CALL = 3
SPINS_PER_CALIBRATION = 2


def warm_up(fn, dev, count, budget_s=None):
    """Calls `fn()` up to `count` times, synchronising the device after each call; stops after a
    quarter of `budget_s` (the CPU time budget). The candidate's and the reference's warm-up
    both run through here, so they are alike. Returns how long it took, in ms."""
    t0 = time.monotonic()
    for _ in range(count):
        fn()
        _sync(dev)
        if budget_s is not None and time.monotonic() - t0 > budget_s / 4:
            break
    return (time.monotonic() - t0) * 1e3


def cupti_warmup(dev):
    """Starts and stops CUPTI recording once, so its one-time start-up (about a second) never
    falls inside a workload's timing, and checks that the records read back as they should: a
    spin kernel and a device-to-device copy, in launch order, with their names and plausible
    spans. Returns None, or why CUPTI is unusable."""
    import torch

    why = _cupti_start()
    if why:
        return why
    a = torch.zeros(1 << 16, device=dev)
    b = torch.empty_like(a)
    torch.cuda.synchronize()
    torch.cuda._sleep(1000)
    b.copy_(a)
    torch.cuda.synchronize()
    recs, why = _cupti_stop()
    why = why or _records_check(recs)
    if why:
        # Every later start() says so, and the timing falls back to events with this reason.
        kgcupti.RECORDER.error = f"CUPTI unusable: {why}"
    return why


def _records_check(recs):
    """Why the warm-up's records (a spin kernel, then a device-to-device copy) do not read as
    expected, or None: the check that the record layout kgcupti reads matches the library."""
    spins = [r for r in recs if "spin_kernel" in r[3]]
    copies = [r for r in recs if r[3] == "Memcpy DtoD"]
    if not spins or not copies:
        names = sorted({r[3][:60] for r in recs})[:6]
        return f"CUPTI records did not read as a spin kernel and a copy ({len(recs)} records: {names})"
    s, c = spins[-1], copies[-1]
    if not (0 < s[2] - s[1] < 10**9 and 0 <= c[2] - c[1] < 10**9):
        return f"CUPTI records carry implausible spans (spin {s[1]}..{s[2]}, copy {c[1]}..{c[2]})"
    if not s[0] < c[0]:
        return f"CUPTI correlation ids are not in launch order (spin {s[0]}, copy {c[0]})"
    if not s[2] <= c[1]:
        return "CUPTI timestamps are not in launch order (the copy started before the spin ended)"
    return None


def _cupti_start():
    """Starts recording device activities (kgcupti). Returns None, or why it could not start."""
    return kgcupti.RECORDER.start()


def _cupti_stop(keep=True):
    """Stops recording; returns (records, why) as kgcupti.Recorder.stop does."""
    return kgcupti.RECORDER.stop(keep)


def cupti_spans(events, count, spun, late=None, parsed=None):
    """Per timed call, the span of its device activity (kernels, copies, memsets on any stream)
    from CUPTI records: from the end of the start marker (the one-cycle spin launched right
    before the call) to the last end, so the first kernel's launch gap counts as a later
    kernel's does, and so does host work in the call that delays its first kernel.

    Calls are told apart by launch order (correlation ids): each call's activities lie between
    its start marker and the one-cycle spin launched right after its end event. Returns
    (spans_ms, None) or (None, why) when the records cannot be split unambiguously. `late`, when
    a list, gets the number of calls whose first start came later than a queued launch would
    (CUPTI_QUEUE_GAP_NS after the marker). `parsed`, when given, is
    `_activities_and_spins(events, trailing)` already computed (time_calls leaves out the
    calibration brackets' spins, recorded after the timed calls)."""
    if not spun:
        return None, "no spin kernel to delimit calls"
    acts, spins = parsed if parsed is not None else _activities_and_spins(events)
    expected = SPINS_PER_CALL * count
    if len(spins) != expected:
        return None, f"found {len(spins)} spin kernels in the CUPTI records, {expected} expected for {count} timed calls"
    spans = []
    n_late = 0
    for j in range(count):
        k, stop = spins[SPINS_PER_CALL * j + 1], spins[SPINS_PER_CALL * j + 2]
        mine = acts[k + 1: stop]
        if not mine:
            return None, f"timed call {j} has no device activity in the CUPTI records"
        start = acts[k][2]
        first = min(a[1] for a in mine)
        last = max(a[2] for a in mine)
        n_late += first - start > CUPTI_QUEUE_GAP_NS
        spans.append(max(last - start, 0) / 1e6)
    if late is not None:
        late.append(n_late)
    return spans, None


def _activities_and_spins(events, trailing=0):
    """Device activities (kgcupti's (correlation id, start ns, end ns, name) records) in launch
    order, and the positions of our spin kernels among them but the last `trailing` (the
    calibration brackets' spins, recorded after the timed calls): timed call j lies between
    spins 3j+1 (its start marker) and 3j+2."""
    acts = sorted(events)
    spins = [k for k, a in enumerate(acts) if "spin_kernel" in a[3]]
    return acts, spins[:max(len(spins) - trailing, 0)]


def cupti_call_kernels(events, limit=8, parsed=None):
    """Distinct names of the device activities inside the timed calls (split as cupti_spans
    splits them), with their counts, most frequent first: which kernels the candidate really
    ran (a per-process kernel choice shows up here). At most `limit` names; `parsed` as in
    cupti_spans."""
    acts, spins = parsed if parsed is not None else _activities_and_spins(events)
    counts = {}
    for k, stop in zip(spins[1::SPINS_PER_CALL], spins[2::SPINS_PER_CALL]):
        for a in acts[k + 1: stop]:
            counts[a[3]] = counts.get(a[3], 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return {name[:160]: n for name, n in top}


def alloc_like_spec(outputs, dev):
    """Empty tensors for output specs ({"shape", "dtype"}); on the CPU their pages are touched
    now, so a first write inside a timed call pays no page faults."""
    import torch

    outs = [torch.empty(o["shape"] if o["shape"] is not None else [], dtype=torch_dtype(o["dtype"]), device=dev)
            for o in outputs]
    if dev.type == "cpu":
        for o in outs:
            if o.numel():
                o.view(-1).view(torch.uint8).zero_()
    return outs


def stash_outputs(res, bufs):
    """Copies value-returned outputs into preallocated buffers, outside the timed span, so the
    originals can be freed and the next call reuses their memory (keeping every original, or
    cloning each, made calls up to 3x slower on the CPU than a caller that drops them).
    Returns the buffers, or `res` itself when anything does not match exactly (wrong count,
    shape, dtype or a non-plain tensor), so the judge still sees what was returned."""
    import torch

    vals = list(res) if isinstance(res, (list, tuple)) else [res]
    if len(vals) != len(bufs):
        return res
    for v, b in zip(vals, bufs):
        if type(v) is not torch.Tensor or v.shape != b.shape or v.dtype != b.dtype or v.device != b.device:
            return res
    for v, b in zip(vals, bufs):
        b.copy_(v)
    return bufs


# Outputs the candidate hands the judge: raw bytes behind a JSON header, not a pickle. For a
# batch of ten 8 MB rounds on an H200, torch.save (after a pageable copy to the host) and
# torch.load took 82 + 59 ms of a workload's 307 ms; staging through freshly pinned host memory
# took as long (pinning ~100 MB cost ~1 ms a MB), hence copies straight into the file's pages.
OUTPUTS_MAGIC = b"KGOUTS01"
OUTPUTS_ALIGN = 64
# The header is the candidate's: its size is bounded before it is read.
OUTPUTS_HEADER_MAX = 16 << 20


def _aligned(n):
    return -(-n // OUTPUTS_ALIGN) * OUTPUTS_ALIGN


def write_outputs(path, groups, dev):
    """Writes `groups` (each a list of outputs, or a string saying why there are none) to `path`:
    the magic, the header's length (8 bytes, little-endian), the JSON header, then every
    tensor's bytes at an aligned offset, copied from its device straight into the file's
    mapped pages. An output that is not a tensor goes as a string (what the judge reports it
    as)."""
    header, copies, off = _plan_outputs(groups)
    head = json.dumps({"groups": header}).encode()
    pre = OUTPUTS_MAGIC + len(head).to_bytes(8, "little") + head
    start = _aligned(len(pre))
    with open(path, "wb") as f:
        f.write(pre + bytes(start - len(pre)))
        f.truncate(start + off)
    if off:
        import torch

        data = torch.from_file(path, shared=True, size=start + off, dtype=torch.uint8)
        _copy_into(data[start:], copies)
        del data


def _copy_into(data, copies):
    """Copies each (tensor, offset, nbytes) of _plan_outputs into the uint8 tensor `data`."""
    import torch

    for t, o, n in copies:
        if n:
            data[o:o + n].copy_(t.contiguous().reshape(-1).view(torch.uint8))


def _plan_outputs(groups):
    """(header groups, [(tensor, offset, nbytes)], total bytes) for `groups` (write_outputs)."""
    import torch

    header, copies, off = [], [], 0
    for g in groups:
        if not isinstance(g, list):
            header.append({"str": str(g)})
            continue
        row = []
        for o in g:
            if isinstance(o, torch.Tensor):
                t = o.detach()
                n = t.numel() * t.element_size()
                row.append({"dtype": dtype_name(t.dtype), "shape": list(t.shape), "offset": off, "nbytes": n})
                copies.append((t, off, n))
                off = _aligned(off + n)
            else:
                row.append({"str": str(o)})
        header.append(row)
    return header, copies, off


def open_candidate_file(path):
    """Opens, for reading, a file in a directory the candidate controls: never through a
    symlink it planted (the judge may run as root), never a FIFO or device that would block or
    feed it (ValueError)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"`{os.path.basename(path)}` is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_outputs(path, dev):
    """The groups `write_outputs` wrote to `path` (tensors on `dev`, views of one buffer), or
    raises ValueError saying why the file cannot be read as such. The file is the candidate's:
    every field is checked before any bytes are trusted."""
    import torch

    try:
        f = open_candidate_file(path)
    except OSError as e:
        raise ValueError(f"cannot open the outputs file: {e}") from e
    with f:
        lead = f.read(16)
        if len(lead) < 16 or lead[:8] != OUTPUTS_MAGIC:
            raise ValueError("not a kernelgate outputs file")
        hlen = int.from_bytes(lead[8:], "little")
        if hlen > OUTPUTS_HEADER_MAX:
            raise ValueError(f"header of {hlen} bytes, at most {OUTPUTS_HEADER_MAX} allowed")
        raw = f.read(hlen)
        if len(raw) != hlen:
            raise ValueError("header cut short")
        head = json.loads(raw)
        start = _aligned(16 + hlen)
        plan, need = _plan_groups(head.get("groups") if isinstance(head, dict) else None,
                                  os.fstat(f.fileno()).st_size - start)
        # Read into our own memory, never mapped: the candidate may still hold the file, and a
        # mapping it truncated would fault.
        buf = output_stage(need, dev)
        f.seek(start)
        got = f.readinto(memoryview(buf.numpy())) if need else 0
        if got != need:
            raise ValueError(f"data cut short: {got} of {need} bytes")
    if dev.type != "cpu":
        buf = buf.to(dev)
    return _groups_in(plan, buf)


def _plan_groups(groups, size):
    """(plan, bytes needed) for header `groups` over `size` bytes of data: per group a row of
    _out_entry results, or one for a group that is a string. Raises ValueError."""
    if not isinstance(groups, list):
        raise ValueError("header holds no list of groups")
    plan, need = [], 0
    for g in groups:
        if isinstance(g, dict):
            plan.append(_out_entry(g, size))
            continue
        if not isinstance(g, list):
            raise ValueError("a group is neither a list of outputs nor a string")
        row = [_out_entry(e, size) for e in g]
        need = max([need] + [e[1] + e[2] for e in row if isinstance(e, tuple)])
        plan.append(row)
    return plan, need


def _groups_in(plan, buf):
    """The groups of `plan` as views of the uint8 tensor `buf` (strings stay strings)."""
    def tensor(e):
        if not isinstance(e, tuple):
            return e
        dt, o, n, shape = e
        return buf[o:o + n].view(dt).view(shape)

    return [[tensor(e) for e in p] if isinstance(p, list) else tensor(p) for p in plan]


# Outputs handed over on the device (kgvmm): the candidate copies them into one pool of
# shareable memory it keeps (grown to the next power of two), sends the pool's descriptor to the
# parent whenever it made a new one, and the judge copies them out into its own memory at once.
_POOL = []


def device_outputs(groups, dev, chan):
    """Copies `groups` into this process's output pool on `dev` and returns the descriptor the
    judge reads them by (read_device_outputs): the pool's number (a new number comes with its
    descriptor sent on `chan` first), its size and the header. Raises kgvmm.VmmError (or
    OSError) when the pool cannot be made or sent; the caller then writes a file."""
    import torch

    header, copies, total = _plan_outputs(groups)
    new = not _POOL or _POOL[0][1].size < total
    if new:
        if _POOL:
            _POOL[0][1].close()
            number = _POOL[0][0] + 1
            _POOL.clear()
        else:
            number = 1
        pool = kgvmm.Pool.create(1 << max(total - 1, 1 << 20).bit_length(), dev.index or 0)
        fd = pool.export_fd()
        try:
            chan.send_fd(fd)
        except OSError:
            pool.close()
            raise
        finally:
            os.close(fd)
        _POOL.append((number, pool))
    number, pool = _POOL[0]
    if total:
        _copy_into(pool.view(total), copies)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)  # the judge reads on its own streams, after our reply
    return {"pool": number, "size": pool.size, "groups": header}


def read_device_outputs(desc, dev, pool):
    """The groups `device_outputs` described in `desc`, copied out of `pool` (the kgvmm.Pool
    mapped from the candidate's descriptor) into memory of our own on `dev` at once: the
    candidate still holds the pool and may write to it. Raises ValueError for a header that
    does not fit the pool."""
    import torch

    if not isinstance(desc, dict):
        raise ValueError("the device outputs are not described by an object")
    plan, need = _plan_groups(desc.get("groups"), pool.size)
    buf = torch.empty(need, dtype=torch.uint8, device=dev)
    if need:
        buf.copy_(pool.view(need))
    return _groups_in(plan, buf)


# The judge's host buffer for outputs on their way to a GPU (output_stage), made at `hello`.
OUTPUT_STAGE_BYTES = 128 << 20
_STAGE = []


def output_stage(n, dev):
    """A host buffer of `n` bytes to read outputs into on their way to `dev`. On a GPU it is a
    view of one pinned buffer kept for the worker's life and grown to the next power of two when
    too small (pinning ~100 MB cost ~80 ms on an H200 host, and reading into fresh pageable
    memory ran at ~1 GB/s there): its contents last until the next call. On the CPU a fresh one,
    since the tensors read are views of it."""
    import torch

    if dev.type == "cpu":
        return torch.empty(n, dtype=torch.uint8)
    if not _STAGE or _STAGE[0].numel() < n:
        size = 1 << max(n - 1, 1).bit_length()
        try:
            _STAGE[:] = [torch.empty(size, dtype=torch.uint8, pin_memory=True)]
        except RuntimeError:  # pinning refused (a memlock limit): pageable, still kept
            _STAGE[:] = [torch.empty(size, dtype=torch.uint8)]
    return _STAGE[0][:n]


class ForeignTensor:
    """A tensor output of a dtype outside the judge's table (complex, a wide unsigned type):
    its bytes are never read; the judge reports its dtype (INCORRECT_DTYPE) or its shape."""

    def __init__(self, dtype, shape):
        import torch

        self.dtype_name = dtype[:40]
        self.shape = torch.Size(shape)


def _out_entry(e, size):
    """A header entry as (dtype, offset, nbytes, shape), a ForeignTensor, or its string."""
    if not isinstance(e, dict):
        raise ValueError("an output entry is not an object")
    if "str" in e:
        if not isinstance(e["str"], str):
            raise ValueError("a string entry holds no string")
        return e["str"]
    if not isinstance(e.get("dtype"), str):
        raise ValueError("an output entry names no dtype")
    shape, o, n = e.get("shape"), e.get("offset"), e.get("nbytes")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"shape {shape!r} is not a list of sizes")
    try:
        dt = torch_dtype(e["dtype"])
    except ValueError:
        return ForeignTensor(e["dtype"], shape)
    if type(o) is not int or type(n) is not int or o < 0 or o % OUTPUTS_ALIGN:
        raise ValueError(f"offset {o!r} is not an aligned position")
    if n != math.prod(shape) * dt.itemsize:
        raise ValueError(f"{n!r} bytes do not hold a {dtype_name(dt)} tensor of shape {shape}")
    if o + n > size:
        raise ValueError(f"bytes {o}..{o + n} lie past the end of the data ({size} bytes)")
    return dt, o, n, shape


def finite_or_none(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
