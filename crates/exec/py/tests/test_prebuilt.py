"""The builder's `build` op and the candidate's import of the module it made: a C++ module
(pybind11 only, host code) built by op_build where the parent expects it, then imported by
op_load from a copy as the candidate does, never rebuilt there."""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import candidate  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def interpreter_tools_on_path(monkeypatch):
    """As kernelgate runs builds: the interpreter's own `bin` (ninja) first on PATH."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))

SOURCE = """#include <pybind11/pybind11.h>
int add_two(int x) { return x + 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_two", &add_two); }
"""


def solution(source=SOURCE):
    return {
        "name": "ext", "definition": "d", "author": "t",
        "spec": {"languages": ["cuda_cpp"], "target_hardware": ["any"],
                 "entry_point": "ext.cpp::add_two", "compile_options": {"ld_flags": []}},
        "sources": [{"path": "ext.cpp", "content": source}],
    }


def test_the_built_module_is_imported_from_its_copy_without_a_build(tmp_path):
    name = "kg_ext_0123456789abcdef"
    build_root = tmp_path / "build"
    reply = candidate.op_build({"solution": solution(), "source_dir": str(tmp_path / "src"),
                                "build_root": str(build_root), "name": name})
    assert reply == {"result": "ok"}, reply
    module = build_root / name / f"{name}.so"
    assert module.is_file()
    # The parent copies the checked module into the candidate's own directory.
    copy = tmp_path / "cand" / "prebuilt" / f"{name}.so"
    copy.parent.mkdir(parents=True)
    shutil.copy(module, copy)
    shutil.rmtree(build_root)
    cache = tmp_path / "cand-cache"
    reply = candidate.op_load({"solution": solution(), "source_dir": str(tmp_path / "cand" / "src"),
                               "cache_dir": str(cache),
                               "prebuilt": {"path": str(copy), "name": name}})
    assert reply == {"result": "ok"}, reply
    assert candidate.STATE["fn"](40) == 42
    # Nothing was built in the candidate.
    assert not cache.exists()


def test_a_failed_build_is_a_compile_error_naming_the_source(tmp_path):
    reply = candidate.op_build({"solution": solution(SOURCE.replace("x + 2", "x +")),
                                "source_dir": str(tmp_path / "src"),
                                "build_root": str(tmp_path / "build"), "name": "kg_ext_bad"})
    assert reply["result"] == "error" and reply["kind"] == "compile", reply
    text = reply["message"] + reply.get("traceback", "")
    assert "Error building extension" in text and "ext.cpp" in text, text
