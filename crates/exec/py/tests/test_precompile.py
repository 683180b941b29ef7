"""The precompiler on a machine with no GPU: Triton's real compiler for an sm_90 target, a
stand-in driver, launches turned into compiles; each job in a fresh interpreter (the
precompiler patches Triton's classes for its whole process)."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl

    @triton.jit
    def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

    @triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
    @triton.jit
    def _tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1, mask=m)

    def run(x, y):
        if x.shape[0] == 3:
            raise ValueError("odd shape refused")
        n = x.numel()
        _scale[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        _tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
''')


def _job(tmp_path, shapes):
    sol = {"name": "s", "spec": {"languages": ["triton"], "entry_point": "k.py::run"},
           "sources": [{"path": "k.py", "content": KERNEL}]}
    calls = [{"inputs": [{"shape": s, "dtype": "float32"}], "outputs": [{"shape": s, "dtype": "float32"}]}
             for s in shapes]
    job = {"solution": sol, "source_dir": str(tmp_path / "src"), "arch": 90, "warp_size": 32,
           "dps": True, "calls": calls}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return path


def _precompile(tmp_path, job, env_extra=None):
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import precompile; "
            "print(json.dumps(precompile.precompile(json.load(open(sys.argv[2])))))")
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": "",
           **(env_extra or {})}
    r = subprocess.run([sys.executable, "-c", code, HERE, str(job)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _stub_libcuda(tmp_path):
    """A CUDA driver library with no symbols: enough to link Triton's launchers against."""
    d = tmp_path / "stub"
    d.mkdir()
    # The driver functions a launcher links against; none is called when it is built.
    src = "".join(f"int {f}(void) {{ return 1; }}\n" for f in (
        "cuCtxGetCurrent", "cuCtxSetCurrent", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
        "cuFuncSetAttribute", "cuGetErrorString", "cuPointerGetAttribute"))
    (d / "stub.c").write_text(src)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "stub.c")], check=True)
    return d


def test_the_kernels_of_every_call_compile_for_the_target_without_a_gpu_and_none_runs(tmp_path):
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    job = _job(tmp_path, [[4096], [3], [4096]])
    stub = str(_stub_libcuda(tmp_path))
    r = _precompile(tmp_path, job, {"TRITON_LIBCUDA_PATH": stub, "LD_LIBRARY_PATH": stub})
    # One plain kernel and both configurations of the autotuned one; the repeated shape adds
    # nothing, the refused one is named.
    assert r["kernels"] == 3, r
    assert r["launchers"] == 3, r
    assert r["failed_count"] == 1 and "odd shape refused" in r["failed"][0], r
    metas = {p: json.load(open(p)) for p in glob.glob(str(tmp_path / "cache" / "*" / "_*.json"))
             if not os.path.basename(p).startswith("__grp__")}
    assert sorted(os.path.basename(p) for p in metas) == ["_scale.json", "_tuned.json", "_tuned.json"]
    assert {(m["target"]["backend"], m["target"]["arch"]) for m in metas.values()} == {("cuda", 90)}
    assert len(glob.glob(str(tmp_path / "cache" / "*" / "*.cubin"))) == 3
    # The three kernels take the same arguments: one launcher module serves them all.
    assert len(glob.glob(str(tmp_path / "cache" / "*" / "__triton_launcher*.so"))) == 1


def test_a_launcher_that_cannot_be_built_is_named_and_the_kernels_stay(tmp_path):
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    none = str(tmp_path / "none")
    r = _precompile(tmp_path, _job(tmp_path, [[4096]]), {"TRITON_LIBCUDA_PATH": none, "LD_LIBRARY_PATH": none})
    if r["launchers"]:
        pytest.skip("this host's loader finds a CUDA driver library: the launchers built")
    assert r["kernels"] == 3 and r["launchers"] == 0, r
    assert r["failed_count"] == 3 and all(f.startswith("launcher of _") for f in r["failed"]), r


def test_torch_work_in_the_solution_costs_nothing_there(tmp_path):
    """The calls' tensors hold no data: a wrapper that also multiplies a 160 GB matrix (which
    no CPU tensor could hold) still gets its kernel compiled."""
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    heavy = KERNEL.replace('''    def run(x, y):
        if''', '''    def run(x, y):
        import torch
        big = torch.empty(200000, 200000, dtype=x.dtype, device=x.device)
        (big @ big).sum()
        if''')
    job = _job(tmp_path, [[4096]])
    data = json.loads(job.read_text())
    data["solution"]["sources"][0]["content"] = heavy
    job.write_text(json.dumps(data))
    none = str(tmp_path / "none")
    r = _precompile(tmp_path, job, {"TRITON_LIBCUDA_PATH": none, "LD_LIBRARY_PATH": none})
    assert r["kernels"] == 3, r
    assert not any("big" in f or "memory" in f.lower() for f in r["failed"]), r


def test_a_device_node_that_is_not_covered_stops_it_before_any_solution_code(tmp_path):
    """The parent names the GPU device nodes it covered; one that is not /dev/null here (the
    sandbox's view did not hold) stops the precompiler before the solution is imported."""
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    node = tmp_path / "nvidia0"
    node.write_text("a GPU")
    job = _job(tmp_path, [[4096]])
    data = json.loads(job.read_text())
    data["solution"]["sources"][0]["content"] = "open(__file__ + '.imported', 'w').close()\n" + KERNEL
    data["covered"] = ["/dev/null", str(node)]
    job.write_text(json.dumps(data))
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import precompile; "
            "precompile.precompile(json.load(open(sys.argv[2])))")
    r = subprocess.run([sys.executable, "-c", code, HERE, str(job)], capture_output=True, text=True,
                       env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode != 0 and "NotCovered" in r.stderr and "nvidia0" in r.stderr, r.stderr
    assert not glob.glob(str(tmp_path / "src" / "*")), "no solution source was even written"
