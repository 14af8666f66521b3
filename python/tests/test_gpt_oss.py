"""gpt-oss's MXFP4 experts on moegen's Hopper simulator (bf16 activations, clamped SwiGLU,
both biases): bit-identical to moegen's CPU reference, within 1 % of a float64 MoE."""

import numpy as np
import pytest

import moegen
from common import GptOssCase, relative_l2

# Both sides see the same bf16 input and the same weights exactly (MXFP4 dequantizes
# exactly); moegen rounds h to bf16 before GEMM2, each route's contribution and the output
# to bf16, each within 2^-9 relative: ~3 * 2^-9 ~ 0.6 % together, against float64
# throughout. 1 % leaves room for accumulation order; a wrong row parity, expert or bias
# is off by tens of percent.
BOUND = 0.01


@pytest.fixture(scope="module")
def case():
    return GptOssCase(seed=3)


@pytest.fixture(scope="module")
def layer(case):
    return moegen.MoeLayer.from_gpt_oss_mxfp4(
        **case.layer_args(), max_num_tokens=16, keep_host_weights=True
    )


def test_runs_the_hopper_kernels(layer):
    assert layer.arch == "sm90" and layer.device == "cpu"


def test_equals_the_cpu_reference_bit_for_bit(layer, case):
    out = layer(case.x, case.ids, case.weights)
    assert np.any(out != 0)
    np.testing.assert_array_equal(out, layer.reference(case.x, case.ids, case.weights))


def test_is_within_one_percent_of_a_float64_moe(layer, case):
    out = layer(case.x, case.ids, case.weights)
    err = relative_l2(out.astype(np.float64), case.float64_moe())
    print(f"relative L2 error vs float64: {err:.5f} (bound {BOUND})")
    assert err < BOUND


def test_other_swiglu_parameters_change_the_output(case):
    other = moegen.MoeLayer.from_gpt_oss_mxfp4(
        **case.layer_args(), max_num_tokens=16, swiglu=(1.0, 0.5, 3.0)
    )
    out = other(case.x, case.ids, case.weights)
    err = relative_l2(out.astype(np.float64), case.float64_moe(1.0, 0.5, 3.0))
    assert err < BOUND
    assert relative_l2(out.astype(np.float64), case.float64_moe()) > 10 * BOUND
