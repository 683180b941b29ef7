"""The device and environment a worker runs on (embedded in kg-exec): the torch device of a
device name, its identity, clocks, driver and library versions; a solution's sources written
out and its Python module imported (the candidate and the precompiler load it alike)."""

import importlib.util
import os
import sys

import kg_wire  # noqa: F401  (first: it completes the import path the workers start without)


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


def warm(what):
    """In a candidate process as it starts, before any solution code: what a Triton solution's
    import and first call would otherwise spend in its evaluation (`KG_WARM`: "triton" imports
    Triton; "triton-cuda" also computes Triton's own cache key and builds its CUDA driver
    utilities into this solution's own cache). Best effort: what fails here is tried again, as always, when the solution needs it."""
    if what not in ("triton", "triton-cuda"):
        return
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401

        if what == "triton-cuda":
            # Triton hashes its own sources and libtriton (~0.45 s, once a process) the first
            # time it looks a kernel up in its cache: in the solution's first call, else here.
            from triton.runtime.cache import triton_key

            triton_key()
            from triton.backends.nvidia.driver import CudaUtils

            CudaUtils()
    except Exception as e:  # noqa: BLE001  (best effort; see above)
        print(f"kernelgate: preparing {what} ahead failed ({type(e).__name__}: {e}); the solution does it", file=sys.stderr)


def write_sources(sol, root):
    """Writes a solution's source files below `root` (none may escape it)."""
    for s in sol["sources"]:
        p = os.path.normpath(os.path.join(root, s["path"]))
        if not p.startswith(os.path.abspath(root) + os.sep):
            raise ValueError(f"source path `{s['path']}` escapes the solution directory")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(s["content"])


def import_source(root, file):
    """Imports the solution's Python file `file` (below `root`) as a module of its own name."""
    modname = os.path.splitext(os.path.basename(file))[0]
    spec_ = importlib.util.spec_from_file_location(modname, os.path.join(root, file))
    mod = importlib.util.module_from_spec(spec_)
    sys.modules[modname] = mod
    spec_.loader.exec_module(mod)
    return mod
