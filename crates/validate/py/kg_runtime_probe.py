"""kernelgate runtime probe: imports the repository's package and reports where it came from.

argv: module name, output path, then roots whose native extensions are identified.
"""

import importlib
import json
import os
import sys


def main():
    module, out, roots = sys.argv[1], sys.argv[2], [os.path.realpath(r) for r in sys.argv[3:]]
    doc = {
        "module": module,
        "module_path": None,
        "module_version": None,
        "python_executable": sys.executable,
        "python_version": sys.version.split()[0],
        "torch_version": None,
        "triton_version": None,
        "native": [],
        "error": None,
    }
    try:
        m = importlib.import_module(module)
        path = getattr(m, "__file__", None) or (list(getattr(m, "__path__", [])) or [None])[0]
        doc["module_path"] = os.path.realpath(path) if path else None
        v = getattr(m, "__version__", None)
        doc["module_version"] = str(v) if v is not None else None
    except BaseException as e:  # the import error is the evidence
        doc["error"] = "%s: %s" % (type(e).__name__, e)
    for name in ("torch", "triton"):
        mod = sys.modules.get(name)
        if mod is not None:
            doc[name + "_version"] = str(getattr(mod, "__version__", None))
        else:
            # Not imported by the package itself (lazy imports): the installed distribution's
            # version, read from its metadata without importing it.
            try:
                from importlib import metadata

                doc[name + "_version"] = metadata.version(name)
            except Exception:
                pass
    native = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and f.endswith((".so", ".pyd")):
            native.add(os.path.realpath(f))
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                if len(parts) >= 6 and ".so" in parts[-1]:
                    native.add(os.path.realpath(parts[-1]))
    except OSError:
        pass
    doc["native"] = sorted(p for p in native if any(p.startswith(r + os.sep) for r in roots))
    with open(out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
