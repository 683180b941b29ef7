"""The judge's output comparison (`judge_compare.compare_many`) on hand-made tensors: each failure it must
report, and the figures it returns."""

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import judge  # noqa: E402
import judge_compare  # noqa: E402
import kg_handover  # noqa: E402
import kg_inputs  # noqa: E402


def compare(pairs, tol, inputs=None):
    """judge_compare.compare_many for the definition and device the test set in judge.STATE."""
    return judge_compare.compare_many(pairs, tol, judge.STATE["definition"], judge.STATE["device"], inputs)

TOL = {"max_atol": 1e-3, "max_rtol": 1e-3, "required_matched_ratio": 1.0}


@pytest.fixture(autouse=True)
def one_output():
    judge.STATE["definition"] = {"outputs": {"y": {"dtype": "float32"}}}
    judge.STATE["device"] = torch.device("cpu")


def check(out, ref, **tol):
    return compare([([out], [ref])], {**TOL, **tol})[0]


def test_matching_outputs_pass_with_their_errors_reported():
    r = torch.tensor([1.0, -2.0, 4.0])
    res = check(r + torch.tensor([0.0, 0.0005, 0.0]), r)
    assert res["status"] == "PASSED"
    assert res["max_abs"] == pytest.approx(0.0005, rel=1e-3)
    assert res["matched_ratio"] == 1.0 and not res["has_nan"] and not res["has_inf"]


def test_an_element_outside_tolerance_fails_with_the_ratio():
    r = torch.ones(4)
    res = check(torch.tensor([1.0, 1.0, 1.0, 1.5]), r)
    assert res["status"] == "INCORRECT_NUMERICAL"
    assert res["matched_ratio"] == 0.75 and "0.750000 of elements" in res["message"]
    assert check(torch.tensor([1.0, 1.0, 1.0, 1.5]), r, required_matched_ratio=0.7)["status"] == "PASSED"
    assert check(torch.tensor([1.0, 1.0, 1.0, 1.5]), r, required_matched_ratio=0.7, max_error_cap=0.1)["status"] == "INCORRECT_NUMERICAL"


def test_nan_or_inf_where_the_reference_differs_fails_and_is_counted():
    r = torch.ones(3)
    res = check(torch.tensor([1.0, math.nan, math.inf]), r)
    assert res["status"] == "INCORRECT_NUMERICAL" and res["has_nan"] and res["has_inf"]
    assert "2 element(s) are NaN/Inf" in res["message"]
    # -inf on both sides passes only when allowed
    r = torch.tensor([1.0, -math.inf])
    assert check(torch.tensor([1.0, -math.inf]), r)["status"] == "INCORRECT_NUMERICAL"
    assert check(torch.tensor([1.0, -math.inf]), r, allow_negative_inf=True)["status"] == "PASSED"


def test_all_zeros_against_a_nonzero_reference_fails_even_within_tolerance():
    r = torch.full((8,), 1e-4)
    res = check(torch.zeros(8), r)
    assert res["status"] == "INCORRECT_NUMERICAL" and "all zeros" in res["message"]
    assert check(torch.zeros(8), torch.zeros(8))["status"] == "PASSED"


def test_shape_and_dtype_are_checked_first():
    r = torch.ones(3)
    assert check(torch.ones(4), r)["status"] == "INCORRECT_SHAPE"
    assert check(torch.ones(3, dtype=torch.float16), r)["status"] == "INCORRECT_DTYPE"


def test_a_batch_of_rounds_is_checked_in_order_up_to_the_first_failure(tmp_path):
    judge.STATE["ref_rounds"] = {1: [torch.ones(3)], 2: [torch.ones(3)], 3: [torch.ones(3)]}
    path = str(tmp_path / "out.bin")
    # round 2 is wrong, round 3 wrong in shape: only round 2's failure is reported
    kg_handover.write_outputs(path, [[torch.ones(3)], [torch.zeros(3)], [torch.ones(4)]], torch.device("cpu"))
    res = judge.op_check_rounds({"rounds": [1, 2, 3], "path": path, "tolerance": TOL})
    assert [r["status"] for r in res["results"]] == ["PASSED", "INCORRECT_NUMERICAL"]


def test_a_batch_that_hands_over_fewer_rounds_than_it_ran_is_a_runtime_error(tmp_path):
    judge.STATE["ref_rounds"] = {1: [torch.ones(3)], 2: [torch.ones(3)]}
    path = str(tmp_path / "out.bin")
    kg_handover.write_outputs(path, [[torch.ones(3)]], torch.device("cpu"))
    res = judge.op_check_rounds({"rounds": [1, 2], "path": path, "tolerance": TOL})
    assert res["results"][0]["status"] == "RUNTIME_ERROR" and "1 round output(s), 2 expected" in res["results"][0]["message"]
    # rounds the judge never prepared are a protocol error, not a verdict on the candidate
    assert judge.op_check_rounds({"rounds": [5], "path": path, "tolerance": TOL})["result"] == "error"


def test_outputs_that_are_not_an_outputs_file_are_a_runtime_error_not_a_crash(tmp_path):
    judge.STATE["ref_rounds"] = {1: [torch.ones(3)]}
    path = tmp_path / "out.bin"
    torch.save([[torch.ones(3)]], str(path))  # a pickle is never read
    res = judge.op_check_rounds({"rounds": [1], "path": str(path), "tolerance": TOL})
    assert res["results"][0]["status"] == "RUNTIME_ERROR" and "not a kernelgate outputs file" in res["results"][0]["message"]


def test_rounds_compared_together_report_each_rounds_own_figures():
    judge.STATE["definition"] = {"outputs": {"y": {"dtype": "float32"}, "i": {"dtype": "int64"}}}
    r = [torch.ones(4), torch.arange(4)]
    off = [torch.tensor([1.0, 1.0, 1.0, 1.005]), torch.arange(4)]
    nan = [torch.tensor([1.0, math.nan, 1.0, 1.0]), torch.arange(4)]
    res = compare([(r, r), (off, r), (nan, r)], {**TOL, "required_matched_ratio": 0.7})
    assert [x["status"] for x in res] == ["PASSED", "PASSED", "INCORRECT_NUMERICAL"]
    assert res[0]["max_abs"] == 0.0 and res[1]["max_abs"] == pytest.approx(0.005, rel=1e-3)
    assert res[1]["matched_ratio"] == 0.75 and not res[1]["has_nan"] and res[2]["has_nan"]
    # each output separately: a wrong integer output fails on its own
    bad_i = [torch.ones(4), torch.tensor([0, 1, 2, 4])]
    res = compare([(r, r), (bad_i, r)], TOL)
    assert res[1]["status"] == "INCORRECT_NUMERICAL" and "output `i`" in res[1]["message"]


def test_announced_draws_are_the_ones_each_round_then_hands_over(tmp_path):
    # The parent hands the candidate a batch on these draws while the judge prepares it, and
    # refuses the batch if the judge's own draws differ: they must agree.
    class Module:
        @staticmethod
        def run(x):
            return x * 2

    judge.STATE.update(definition={"inputs": {"x": {"dtype": "float32"}}, "outputs": {"y": {"dtype": "float32"}}},
                       module=Module, seed=1234)
    w = {"uuid": "w-1", "inputs": {"x": {"type": "random"}}}

    def req(n):
        return {"workload": w, "round": n, "path": str(tmp_path / f"in_{n}.pt"), "input_shapes": {"x": [5]},
                "output_shapes": {"y": [5]}, "axes": {}, "generate": True, "digest": n == 0}

    draws = judge.op_draws({"workload": w, "input_shapes": {"x": [5]}, "rounds": [0, 1, 2]})["draws"]
    prepared = judge.op_prepare_rounds({"rounds": [req(0), req(1), req(2)]})
    assert [r["input"] for r in prepared["replies"]] == draws
    assert len({d["seed"] for d in draws}) == 3  # each round its own draw
    # an input that travels as a file announces nothing
    w["inputs"]["x"] = {"type": "safetensors", "path": "x.safetensors", "tensor_key": "x"}
    assert judge.op_draws({"workload": w, "input_shapes": {"x": [5]}, "rounds": [0]})["draws"] is None


CUSTOM_REFERENCE = """
import torch


def generate_inputs(axes_and_scalars, device):
    n = axes_and_scalars["n"]
    ids = torch.randint(0, n, (n,), device=device)
    ids[0] = n - 1
    return {"ids": ids}


def run(ids, w, scale):
    return w[ids] * scale
"""


def test_custom_inputs_are_drawn_alike_by_the_judge_and_from_the_source_alone(tmp_path):
    # A custom-input workload's rounds are drawn in the candidate from the reference's source
    # (no files): the draw the judge announces, the inputs it runs its reference on, and what a
    # process that has only the source draws from it must be the same bytes.
    d = {"inputs": {"ids": {"dtype": "int64"}, "w": {"dtype": "float32"}, "scale": {"dtype": "float32"}},
         "outputs": {"y": {"dtype": "float32"}}, "custom_inputs_entrypoint": "generate_inputs",
         "reference": CUSTOM_REFERENCE}
    judge.STATE.update(seed=99)
    assert judge.op_setup({"definition": d, "work_dir": str(tmp_path)})["result"] == "ok"
    w = {"uuid": "w-c", "inputs": {"ids": {"type": "custom"}, "w": {"type": "random"},
                                   "scale": {"type": "scalar", "value": 0.5}}}
    shapes = {"ids": [6], "w": [6, 3]}
    req = {"workload": w, "round": 0, "path": str(tmp_path / "in_0.pt"), "input_shapes": shapes,
           "output_shapes": {"y": [6, 3]}, "axes": {"n": 6}, "generate": True, "digest": True}
    draws = judge.op_draws({"workload": w, "input_shapes": shapes, "axes": {"n": 6}, "rounds": [0]})["draws"]
    rep = judge.op_prepare(req)
    assert rep["result"] == "ok" and rep["input"] == draws[0] and not (tmp_path / "in_0.pt").exists()
    ids, wt, scale = judge.STATE["ref_out"]["inputs"]
    assert ids[0] == 5 and wt.shape == (6, 3) and scale == 0.5
    # the candidate's side: a module built from the source alone
    kg_inputs.CUSTOM_MODULES.clear()
    drawn = kg_inputs.random_input_set(draws[0]["spec"], int(draws[0]["seed"]), torch.device("cpu"))
    assert kg_inputs.digest(drawn) == rep["digest"]
    assert kg_inputs.digest(kg_inputs.random_input_set(draws[0]["spec"], int(draws[0]["seed"]) + 1,
                                                     torch.device("cpu"))) != rep["digest"]


def test_a_safetensors_input_is_read_from_its_file_beside_drawn_ones(tmp_path):
    # Inputs from a file never go to the candidate as a draw; the judge fills them in from
    # the file and draws the rest exactly as a workload without files would.
    import safetensors.torch as st

    table = torch.arange(12, dtype=torch.float32).view(3, 4)
    st.save_file({"t": table}, str(tmp_path / "w.safetensors"))
    judge.STATE.update(definition={"inputs": {"x": {"dtype": "float32"}, "w": {"dtype": "float32"}},
                                   "outputs": {"y": {"dtype": "float32"}}}, problem_dir=str(tmp_path))
    w = {"uuid": "w-s", "inputs": {"x": {"type": "random"},
                                   "w": {"type": "safetensors", "path": "w.safetensors", "tensor_key": "t"}}}
    shapes = {"x": [5], "w": [3, 4]}
    assert judge.random_spec(w, shapes, {}) is None
    x, wt = judge.gen_inputs(w, shapes, {}, 7)
    assert torch.equal(wt, table)
    drawn = kg_inputs.random_input_set([{"name": "x", "dtype": "float32", "shape": [5]}], 7, torch.device("cpu"))
    assert torch.equal(x, drawn[0])


def test_an_output_of_a_dtype_outside_the_table_is_a_dtype_error_not_unreadable(tmp_path):
    judge.STATE["ref_rounds"] = {1: [torch.ones(3)], 2: [torch.ones(3)]}
    path = str(tmp_path / "out.bin")
    kg_handover.write_outputs(path, [[torch.ones(3, dtype=torch.complex64)]], torch.device("cpu"))
    res = judge.op_check_rounds({"rounds": [1], "path": path, "tolerance": TOL})["results"][0]
    assert res["status"] == "INCORRECT_DTYPE" and "complex64" in res["message"]
    # its shape is still checked first
    kg_handover.write_outputs(path, [[torch.ones(4, dtype=torch.complex64)]], torch.device("cpu"))
    res = judge.op_check_rounds({"rounds": [2], "path": path, "tolerance": TOL})["results"][0]
    assert res["status"] == "INCORRECT_SHAPE"
