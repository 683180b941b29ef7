"""A v2 workload's per-output checks (`judge_compare.compare_checks`, reached through compare_many with
{"checks": [...]}) on hand-made tensors: each check type's failure, its figures, and the
places where a lax reading would let a wrong output through."""

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import judge  # noqa: E402
import judge_compare  # noqa: E402


def compare(pairs, tol, inputs=None):
    """judge_compare.compare_many for the definition and device the test set in judge.STATE."""
    return judge_compare.compare_many(pairs, tol, judge.STATE["definition"], judge.STATE["device"], inputs)


def numeric(**kw):
    c = {"type": "numeric", "output": "y", "max_atol": 1e-3, "max_rtol": 1e-3, "required_matched_ratio": 1.0,
         "max_error_cap": None, "allow_negative_inf": False, "mode": "elementwise", "denominator_epsilon": 1e-12}
    return {**c, **kw}


def one(out, ref, check, dtype="float32"):
    judge.STATE["definition"] = {"outputs": {check["output"]: {"dtype": dtype}}}
    judge.STATE["device"] = torch.device("cpu")
    return compare([([out], [ref])], {"checks": [check]})[0]


def test_one_wrong_element_in_a_thousand_fails_a_v2_numeric_check():
    r = torch.ones(1000)
    o = r.clone()
    o[500] = 2.0
    res = one(o, r, numeric())
    assert res["status"] == "INCORRECT_NUMERICAL"
    c = res["checks"][0]
    assert c["passed"] is False and c["matched_ratio"] == pytest.approx(0.999)
    assert "1 of 1000 element(s)" in res["message"]
    assert one(r.clone(), r, numeric())["status"] == "PASSED"


def test_max_error_cap_and_negative_inf():
    r = torch.tensor([1.0, -math.inf])
    assert one(r.clone(), r, numeric())["status"] == "INCORRECT_NUMERICAL"
    assert one(r.clone(), r, numeric(allow_negative_inf=True))["status"] == "PASSED"
    r = torch.full((4,), 100.0)
    o = r + torch.tensor([0.0, 0.0, 0.0, 0.05])  # within rtol 1e-3 * 100 = 0.1
    assert one(o, r, numeric())["status"] == "PASSED"
    res = one(o, r, numeric(max_error_cap=0.01))
    assert res["status"] == "INCORRECT_NUMERICAL" and "max_error_cap" in res["message"]


def test_normalized_max_bounds_the_error_against_the_largest_reference_value():
    r = torch.tensor([1000.0, 1.0, 0.0])
    o = r + torch.tensor([0.0, 0.5, 0.5])  # 0.5 / 1000 = 5e-4 <= 1e-3
    assert one(o, r, numeric(mode="normalized_max"))["status"] == "PASSED"
    assert one(o, r, numeric())["status"] == "INCORRECT_NUMERICAL"  # elementwise: 0.5 > 1e-3
    res = one(r + 2.0, r, numeric(mode="normalized_max"))
    assert res["status"] == "INCORRECT_NUMERICAL" and "max_rtol" in res["message"]
    # a NaN is never skipped (a Python max over floats would skip it)
    o = r.clone()
    o[1] = math.nan
    assert one(o, r, numeric(mode="normalized_max"))["status"] == "INCORRECT_NUMERICAL"


def test_exact_and_code_distance():
    r = torch.tensor([1, 2, 3], dtype=torch.int32)
    ex = {"type": "exact", "output": "q"}
    assert one(r.clone(), r, ex, "int32")["status"] == "PASSED"
    res = one(r + torch.tensor([0, 0, 1], dtype=torch.int32), r, ex, "int32")
    assert res["status"] == "INCORRECT_NUMERICAL" and res["checks"][0]["mismatched_elements"] == 1
    cd = {"type": "code_distance", "output": "q", "mode": "value", "max_distance": 1, "required_matched_ratio": 1.0}
    assert one(r + 1, r, cd, "int32")["status"] == "PASSED"
    res = one(r + torch.tensor([0, 0, 2], dtype=torch.int32), r, cd, "int32")
    assert res["status"] == "INCORRECT_NUMERICAL" and res["checks"][0]["max_distance"] == 2
    # raw bits: 0x7f and 0x80 are neighbours as integers of one byte, far apart as int8 values
    rb = {**cd, "mode": "raw_bits"}
    a = torch.tensor([127], dtype=torch.int8)
    b = torch.tensor([-128], dtype=torch.int8)
    assert one(a, b, rb, "int8")["status"] == "PASSED"
    assert one(a, b, {**cd, "max_distance": 1}, "int8")["status"] == "INCORRECT_NUMERICAL"


def routing(ids_o, w_o, ids_r, w_r, gating, tie=1e-4):
    judge.STATE["definition"] = {"outputs": {"ids": {"dtype": "int64"}, "w": {"dtype": "float32"}}}
    judge.STATE["device"] = torch.device("cpu")
    c = {"type": "topk_routing", "ids_output": "ids", "weights_output": "w", "gating_input": "g", "bias_input": None,
         "topk": 2, "tie_atol": tie, "weight_atol": 1e-3, "max_mismatch_ratio": 0.0}
    return compare([([ids_o, w_o], [ids_r, w_r])], {"checks": [c]}, [{"g": gating}])[0]


def test_topk_routing_accepts_ties_and_order_and_refuses_other_experts():
    g = torch.tensor([[3.0, 1.0, 1.0, 0.0]])  # experts 1 and 2 tie for second place
    s = torch.softmax(g, dim=-1)
    ids_r = torch.tensor([[0, 1]])
    w_r = s[:, [0, 1]]
    assert routing(ids_r, w_r, ids_r, w_r, g)["status"] == "PASSED"
    # the tied expert instead, or the same experts in another order: same routing
    assert routing(torch.tensor([[0, 2]]), s[:, [0, 2]], ids_r, w_r, g)["status"] == "PASSED"
    assert routing(torch.tensor([[1, 0]]), s[:, [1, 0]], ids_r, w_r, g)["status"] == "PASSED"
    # a worse expert, an id twice, an id past the table
    for bad in ([[0, 3]], [[0, 0]], [[0, 9]]):
        res = routing(torch.tensor(bad), w_r, ids_r, w_r, g)
        assert res["status"] == "INCORRECT_NUMERICAL", bad
    # the right experts with a wrong weight
    res = routing(ids_r, w_r + 0.01, ids_r, w_r, g)
    assert res["status"] == "INCORRECT_NUMERICAL" and "weight" in res["message"]


def test_an_unknown_check_type_raises_rather_than_passes():
    judge.STATE["definition"] = {"outputs": {"y": {"dtype": "float32"}}}
    judge.STATE["device"] = torch.device("cpu")
    with pytest.raises(ValueError):
        compare([([torch.ones(2)], [torch.ones(2)])], {"checks": [{"type": "bitwise", "output": "y"}]})
