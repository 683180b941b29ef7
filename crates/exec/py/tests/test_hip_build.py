"""The hip_cpp build path, tested without ROCm: a stand-in `hipcc` (a script that records its
arguments, then fails on demand or hands the job to the host's C++ compiler) sits in a fake
ROCm root. What runs on AMD hardware is not tested here (docs/kg-bench.md says so)."""

import os
import stat
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import candidate  # noqa: E402

STANDIN = """#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
# torch asks the compiler for its version before it builds; only the build fails on demand.
if [ -n "$STANDIN_HIPCC_FAIL" ] && [ "$1" != "--version" ] && [ "$1" != "-v" ]; then
    echo "stand-in hipcc: failing on demand" >&2
    exit 1
fi
exec c++ "$@"
"""

# Host code only: it builds with any C++ compiler, so the stand-in can succeed on a CPU torch.
BINDING = """#include <torch/extension.h>

torch::Tensor run(torch::Tensor x) { return x * 2; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


def solution(sources, **opts):
    return {
        "name": "hip_double", "definition": "d", "author": "t",
        "spec": {"languages": ["hip_cpp"], "target_hardware": ["gfx942", "gfx942"],
                 "entry_point": "binding.cpp::run", "binding": "torch",
                 "compile_options": opts or None},
        "sources": sources,
    }


@pytest.fixture
def rocm(tmp_path):
    """A fake ROCm root whose bin/hipcc is the stand-in; returns (root, log path)."""
    root = tmp_path / "rocm"
    (root / "bin").mkdir(parents=True)
    log = tmp_path / "hipcc.log"
    hipcc = root / "bin" / "hipcc"
    hipcc.write_text(STANDIN.format(log=log))
    hipcc.chmod(hipcc.stat().st_mode | stat.S_IXUSR)
    return root, log


def test_build_args_follow_the_rocm_port(rocm, tmp_path):
    root, _ = rocm
    env = {"ROCM_PATH": str(root), "PATH": "/usr/bin:/bin"}
    sol = solution(
        [{"path": "binding.cpp", "content": BINDING}, {"path": "k.hip", "content": "// device code\n"},
         {"path": "k.h", "content": ""}],
        hip_cflags=["-O2", "--offload-arch=gfx942"], cflags=["-I/opt/rocm/include"],
        ld_flags=["-L/opt/rocm/lib", "-lamdhip64"],
    )
    args = candidate.cpp_build_args(sol, str(tmp_path / "src"), str(tmp_path / "cache"), env)
    assert env["CXX"] == str(root / "bin" / "hipcc")
    # The solution's gfx targets, once each, as the port sets them.
    assert env["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert [os.path.basename(s) for s in args["sources"]] == ["binding.cpp", "k.hip"]
    # torch hands extra_cuda_cflags to hipcc on ROCm.
    assert args["extra_cuda_cflags"] == ["-O2", "--offload-arch=gfx942"]
    assert args["extra_cflags"] == ["-I" + str(root / "include")]
    assert args["extra_ldflags"] == ["-L" + str(root / "lib"), "-lamdhip64"]
    # No CUDA driver library is linked by default.
    assert candidate.cpp_build_args(solution([]), "r", "c", dict(env))["extra_ldflags"] == []


def test_a_set_cxx_or_arch_is_kept(rocm):
    root, _ = rocm
    env = {"ROCM_PATH": str(root), "CXX": "/my/hipcc", "PYTORCH_ROCM_ARCH": "gfx90a"}
    candidate.cpp_build_args(solution([]), "r", "c", env)
    assert env["CXX"] == "/my/hipcc" and env["PYTORCH_ROCM_ARCH"] == "gfx90a"


def test_no_rocm_is_named(tmp_path):
    if os.path.isdir("/opt/rocm"):
        pytest.skip("this machine has /opt/rocm, the last place a ROCm root is looked for")
    with pytest.raises(RuntimeError, match="ROCM_PATH"):
        candidate.cpp_build_args(solution([]), "r", "c", {"PATH": str(tmp_path)})


def _build(sol, tmp_path, monkeypatch, root):
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for s in sol["sources"]:
        (src / s["path"]).write_text(s["content"])
    monkeypatch.setenv("ROCM_PATH", str(root))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    # The interpreter's bin (ninja) first, as the candidate's PATH has it.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return candidate._build_cpp(sol, str(src), str(tmp_path / "cache"))


def test_the_build_runs_through_hipcc(rocm, tmp_path, monkeypatch):
    root, log = rocm
    sol = solution([{"path": "binding.cpp", "content": BINDING}], cflags=["-O1"])
    mod = _build(sol, tmp_path, monkeypatch, root)
    assert torch.equal(mod.run(torch.ones(3)), torch.full((3,), 2.0))
    calls = log.read_text()
    assert "binding.cpp" in calls and "-O1" in calls, calls


def test_a_failing_hipcc_fails_the_build_with_its_message(rocm, tmp_path, monkeypatch):
    root, _ = rocm
    monkeypatch.setenv("STANDIN_HIPCC_FAIL", "1")
    sol = solution([{"path": "binding.cpp", "content": BINDING}], cflags=["-O1"])
    with pytest.raises(Exception) as e:
        _build(sol, tmp_path, monkeypatch, root)
    assert "Error building extension" in str(e.value), e.value
