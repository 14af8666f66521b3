"""MXFP4 experts in moegen's own layout (plain SwiGLU, bf16 activations) on moegen's Hopper
simulator, and the autotuner: bit-identical to moegen's CPU reference, within 1 % of a
float64 MoE (the bound test_gpt_oss.py derives: bf16 roundings of h, of each route's
contribution and of the output)."""

import numpy as np

import moegen
from common import Mxfp4Case, relative_l2

BOUND = 0.01


def test_moegen_layout_mxfp4():
    case = Mxfp4Case(seed=21)
    layer = moegen.MoeLayer.from_mxfp4(**case.layer_args(), max_num_tokens=8,
                                       keep_host_weights=True)
    assert layer.arch == "sm90"
    out = layer(case.x, case.ids, case.weights)
    np.testing.assert_array_equal(out, layer.reference(case.x, case.ids, case.weights))
    err = relative_l2(out.astype(np.float64), case.float64_moe())
    print(f"relative L2 error vs float64: {err:.5f} (bound {BOUND})")
    assert err < BOUND


def test_autotuned_layer_runs_a_tuned_table():
    case = Mxfp4Case(seed=22, tokens=2)
    layer = moegen.MoeLayer.from_mxfp4(**case.layer_args(), max_num_tokens=2,
                                       autotune=True, tune_iterations=(0, 1),
                                       keep_host_weights=True)
    out = layer(case.x, case.ids, case.weights)
    np.testing.assert_array_equal(out, layer.reference(case.x, case.ids, case.weights))
    assert layer.tactic(2)


def test_num_local_experts_must_match_the_weights():
    case = Mxfp4Case(seed=23)
    try:
        moegen.MoeLayer.from_mxfp4(**case.layer_args(), max_num_tokens=8, num_local_experts=3)
    except moegen.InputError as e:
        assert "num_local_experts: 3, but w1_values holds 4 experts" in str(e)
    else:
        raise AssertionError("no InputError")
