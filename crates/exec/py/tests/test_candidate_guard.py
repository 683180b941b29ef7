"""The candidate's guard: over what a problem's own input generator calls (in the untimed draw
before each timed call, a replaced function it calls would run solution code with the set open),
and over every attribute of the harness's own modules and classes."""

import os
import sys
import types

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import candidate  # noqa: E402
import kg_wire  # noqa: E402
import kg_inputs  # noqa: E402

SOURCE = """
import torch
import torch.nn.functional as F


def _ids(n):
    return torch.randperm(n)


def generate_inputs(axes_and_scalars, device):
    ids = _ids(axes_and_scalars["n"]).to(device)
    return {"ids": ids, "onehot": F.one_hot(ids, axes_and_scalars["n"])}
"""
SPEC = {"custom": {"source": SOURCE, "entrypoint": "generate_inputs", "args": {"n": 5}},
        "inputs": [{"custom": "ids"}, {"custom": "onehot"}]}


@pytest.fixture
def worker():
    """The candidate's globals as its `__main__` sets them at worker start."""
    candidate.HOOKS_AT_START = set()
    candidate.GC_CALLBACKS_AT_START = len(__import__("gc").callbacks)
    candidate.MODULE_ATTRS_AT_START = candidate._module_attrs()
    candidate.CUSTOM_GUARDS.clear()
    candidate.CUSTOM_SOURCES.clear()
    kg_inputs.CUSTOM_MODULES.clear()
    candidate.GUARDED = candidate._guarded()
    candidate.NAMESPACES = candidate._namespace_snapshot()
    yield
    candidate.CUSTOM_GUARDS.clear()
    candidate.CUSTOM_SOURCES.clear()


def test_code_names_reach_helpers_and_aliased_modules():
    fn = kg_inputs.custom_entry(SOURCE, "generate_inputs")
    names = kg_inputs.code_names(fn)
    assert ("torch", "randperm") in names  # called by a helper of the module
    assert ("torch.nn.functional", "one_hot") in names  # through the alias F


def test_a_function_the_generator_calls_replaced_after_the_draw_is_tampering(worker):
    candidate._guard_custom(SPEC)
    assert candidate._tampered() is None
    orig = torch.randperm
    torch.randperm = lambda *a, **k: orig(*a, **k)
    try:
        assert "torch.randperm" in (candidate._tampered() or "")
    finally:
        torch.randperm = orig
    assert candidate._tampered() is None


def test_one_replaced_before_the_first_draw_is_measured_against_worker_start(worker):
    orig = torch.nn.functional.one_hot
    torch.nn.functional.one_hot = lambda *a, **k: orig(*a, **k)
    try:
        candidate._guard_custom(SPEC)
        assert "torch.nn.functional.one_hot" in (candidate._tampered() or "")
    finally:
        torch.nn.functional.one_hot = orig


def test_a_generator_module_the_solution_planted_in_the_cache_is_not_used(worker):
    import hashlib
    import types

    fake = types.ModuleType("fake")
    fake.generate_inputs = lambda a, dev: {"ids": torch.zeros(5, dtype=torch.long), "onehot": torch.zeros(5, 5)}
    kg_inputs.CUSTOM_MODULES[hashlib.sha256(SOURCE.encode()).hexdigest()] = fake
    candidate._guard_custom(SPEC)
    ids, _ = kg_inputs.random_input_set(SPEC, 3, torch.device("cpu"))
    assert sorted(ids.tolist()) == [0, 1, 2, 3, 4]  # a permutation, not the planted zeros
    assert candidate._tampered() is None


def test_an_attribute_made_afresh_on_every_access_is_not_guarded(worker):
    # A module whose __getattr__ builds a new object per access has no identity to compare:
    # guarding it would flag every honest solution.
    import types

    lazy = types.ModuleType("kg_lazy_fixture")
    lazy.__getattr__ = lambda name: (lambda *a: None) if name == "make" else None
    src = "import kg_lazy_fixture\n\ndef generate_inputs(a, device):\n    kg_lazy_fixture.make()\n    return {}\n"
    sys.modules["kg_lazy_fixture"] = lazy
    try:
        candidate._guard_custom({"custom": {"source": src, "entrypoint": "generate_inputs", "args": {}}, "inputs": []})
        assert not any("kg_lazy_fixture" in k for k in candidate.GUARDED)
        assert candidate._tampered() is None
    finally:
        del sys.modules["kg_lazy_fixture"]


def test_any_attribute_of_the_harness_modules_replaced_swapped_or_added_is_tampering(worker, monkeypatch):
    import time

    import kg_timing

    assert candidate._tampered() is None
    # A module's imported module (the clock it reads), a class's method, a constant.
    monkeypatch.setattr(kg_timing, "time", types.SimpleNamespace(perf_counter=time.perf_counter))
    monkeypatch.setattr(kg_timing.EventTimer, "_bracket", lambda *a, **k: ([], []))
    monkeypatch.setattr(kg_timing, "CALIBRATION_SPIN_SHARE", 0.0)
    got = candidate._tampered() or ""
    for name in ("kg_timing.time", "kg_timing.EventTimer._bracket", "kg_timing.CALIBRATION_SPIN_SHARE"):
        assert name in got, got
    monkeypatch.undo()
    assert candidate._tampered() is None
    # A function's code swapped in place (the function object stays), a method added.
    f = kg_inputs.keystream_xor
    code = f.__code__
    f.__code__ = (lambda t, key, index: t).__code__
    kg_inputs.SealedSets.peek = lambda self, i: None
    try:
        got = candidate._tampered() or ""
        assert "replaced kg_inputs.keystream_xor.__code__" in got and "added kg_inputs.SealedSets.peek" in got, got
    finally:
        f.__code__ = code
        del kg_inputs.SealedSets.peek
    assert candidate._tampered() is None
