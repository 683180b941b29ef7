#!/usr/bin/env python3
"""validate-kernel-pr's ``pick-idle-gpu.py``, delegating to ``kg-gpu pick``.

Same arguments (``--samples N --interval S --quiet``, passed through), the picked device's
runtime index (HIP index / CUDA ordinal) on stdout, and the seed's exit codes: 0 picked, 1 GPUs
present but none idle, 2 SMI error or bad input, 3 no GPU. Works as ``PICKER`` and as
``python3 pick-idle-gpu.py`` in scripts written for the skill.

kg-gpu is found as: $KG_GPU, else beside this script, else on PATH.
"""

import os
import shutil
import sys


def main():
    here = os.path.dirname(os.path.realpath(__file__))
    beside = os.path.join(here, "kg-gpu")
    exe = os.environ.get("KG_GPU") or (beside if os.access(beside, os.X_OK) else None)
    exe = exe or shutil.which("kg-gpu")
    if not exe:
        print("pick-idle-gpu.py: error: kg-gpu not found; set KG_GPU or put it on PATH",
              file=sys.stderr)
        return 2  # the seed's "SMI error": says nothing about the GPUs
    try:
        os.execv(exe, [exe, "pick", *sys.argv[1:]])
    except OSError as e:
        # A traceback would exit 1, which the seed reads as "none idle".
        print(f"pick-idle-gpu.py: error: failed to run `{exe}`: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
