#!/usr/bin/env bash
# validate-kernel-pr's `validate_pr.sh`, delegating to kg-validate-pr: the same flags
# (`--repo --patch --head-sha --target/--tests --expected-route --shape-vars --shape-env --grid
# --tol-table --out ...`), the same host variables (PYLIB, PYTHON_BIN, PICKER, TIMEOUT, PERF_*),
# the same report and exit codes, so scripts written for the skill run unchanged. Install it
# (with `pick-idle-gpu.py`) as `.claude/skills/validate-kernel-pr/`.
#
# kg-validate-pr is found as: $KG_VALIDATE_PR, else beside this script, else on PATH.
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
if [[ -n "${KG_VALIDATE_PR:-}" ]]; then
  bin=$KG_VALIDATE_PR
elif [[ -x "$here/kg-validate-pr" ]]; then
  bin=$here/kg-validate-pr
elif bin=$(command -v kg-validate-pr); then
  :
else
  echo "validate_pr.sh: error: kg-validate-pr not found; set KG_VALIDATE_PR or put it on PATH" >&2
  # 2 is INCONCLUSIVE / bad input, as the validator itself exits when it cannot run.
  exit 2
fi
# With PICKER unset the seed uses its shipped picker; kg-validate-pr then uses kg-gpu's, which
# `pick-idle-gpu.py` here delegates to, so PICKER is passed through as the caller set it.
exec "$bin" "$@"
