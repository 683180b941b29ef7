"""kernelgate interpreter probe (embedded in kg-exec): prints one JSON object on stdout."""

import json
import platform
import sys


def main():
    out = {"result": "ok", "python": sys.version.split()[0], "executable": sys.executable,
           "machine": platform.machine()}
    try:
        import torch
    except Exception as e:
        print(json.dumps({"result": "error", "kind": "no_torch", "message": f"{type(e).__name__}: {e}",
                          "python": out["python"], "executable": sys.executable}))
        return
    out["torch"] = torch.__version__
    out["cuda_version"] = torch.version.cuda
    out["hip_version"] = getattr(torch.version, "hip", None)
    try:
        out["accelerator_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["accelerator_available"] else 0
        if out["accelerator_available"]:
            out["device_name"] = torch.cuda.get_device_name(0)
    except Exception as e:
        out["accelerator_available"] = False
        out["device_count"] = 0
        out["accelerator_error"] = f"{type(e).__name__}: {e}"
    for mod in ("triton", "numpy", "safetensors", "ninja"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "unknown")
        except Exception:
            out[mod] = None
    print(json.dumps(out))


main()
