"""kernelgate script runner: installs the validation probe, then runs a target file as
``__main__`` under runpy (argv: target, then the target's own arguments)."""

import os
import runpy
import sys

import kg_validation_probe as _probe


def main():
    target = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(target))
    _probe.install()
    try:
        runpy.run_path(target, run_name="__main__")
    except ImportError as e:
        _probe.record_import_error(e, target, "script")
        raise
    finally:
        sys.setprofile(None)
        _probe.write_receipt()


if __name__ == "__main__":
    main()
