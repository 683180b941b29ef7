"""The `kernelgate` wheel (`cargo xtask wheel`), installed into the test interpreter: problems,
traces and their verification, SOL bounds and scores, and evaluation on the CPU through
kernelgate's engine."""

import json
import pathlib

import pytest

import kernelgate as kg

ROOT = pathlib.Path(__file__).resolve().parents[3]
CORE = ROOT / "problems" / "core"
RMSNORM = CORE / "rmsnorm_bf16_qwen2_5_0_5b"
FIXTURES = ROOT / "crates" / "exec" / "tests" / "fixtures"
FAST = dict(device="cpu", max_workloads=1, rounds=2, warmup=1, iterations=3)


def test_a_problem_loads_with_its_workloads_and_tree_hash():
    p = kg.load_problem(RMSNORM)
    assert p.name == "rmsnorm_bf16_qwen2_5_0_5b"
    assert len(p.workloads) == 7 and all(len(u) == 36 for u in p.workloads)
    assert len(p.tree_sha256) == 64
    assert kg.load_problem(str(RMSNORM)).tree_sha256 == p.tree_sha256


def test_a_problem_that_does_not_load_raises_naming_the_input(tmp_path):
    with pytest.raises(kg.ProblemError, match="/nowhere"):
        kg.load_problem("/nowhere")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "definition.json").write_text("{\"name\": 3}")
    (bad / "workload.jsonl").write_text("")
    with pytest.raises(kg.KernelgateError, match="definition.json"):
        kg.load_problem(bad)
    assert issubclass(kg.ProblemError, kg.KernelgateError)


def test_the_reference_passes_and_its_sealed_traces_verify_until_edited(tmp_path):
    out = tmp_path / "t.jsonl"
    traces = kg.evaluate(RMSNORM, output=out, **FAST)
    assert [t.status for t in traces] == ["PASSED"]
    t = traces[0]
    assert t.reason is None and t.speedup and t.speedup > 0 and t.hardware
    assert json.loads(t.json)["workload"]["uuid"] == t.workload
    read = kg.read_traces(out)
    assert [r.workload for r in read] == [t.workload]
    assert kg.verify_traces(out).ok
    # One byte of the latency changed: the seal no longer matches.
    text = out.read_text()
    at = text.index('"latency_ms":') + len('"latency_ms":')
    digit = "2" if text[at] == "1" else "1"
    out.write_text(text[:at] + digit + text[at + 1:])
    v = kg.verify_traces(out)
    assert not v and not v.ok
    assert any(":1:" in f for f in v.findings), v.findings


def test_a_wrong_kernel_is_caught_with_its_reason():
    add = FIXTURES / "corpus" / "add"
    traces = kg.evaluate(add, solution=str(add / "solutions" / "all_zero_output.json"), **FAST)
    assert traces[0].status == "INCORRECT_NUMERICAL"
    assert traces[0].reason, traces[0].json


def test_an_unusable_device_is_an_evaluate_error():
    with pytest.raises(kg.EvaluateError, match="device `tpu:0`"):
        kg.evaluate(RMSNORM, device="tpu:0")


def test_sol_bounds_and_the_score_of_the_baseline_against_itself(tmp_path):
    bounds = kg.sol_bounds(RMSNORM, "h200")
    assert len(bounds) == 7
    assert all(b.t_sol_ms > 0 and b.bound in ("memory", "compute") for b in bounds)
    assert kg.sol_score(1.0, 2.0, 0.5) == pytest.approx(0.75)
    assert kg.sol_score(2.0, 2.0, 0.5) == pytest.approx(0.5)
    # The reference scored against itself is 0.5: no better than the baseline.
    runs = tmp_path / "base.jsonl"
    kg.evaluate(RMSNORM, output=runs, **FAST)
    sol = tmp_path / "sol.jsonl"
    sol.write_text("".join(
        json.dumps({"definition": b.definition, "workload": b.workload, "t_sol_ms": b.t_sol_ms}) + "\n"
        for b in bounds))
    s = kg.score(runs, runs, sol)
    assert s.problems.keys() == {"rmsnorm_bf16_qwen2_5_0_5b"}
    assert s.overall == pytest.approx(0.5, abs=1e-6)
    with pytest.raises(kg.ScoreError):
        kg.score(tmp_path / "missing.jsonl", runs, sol)
