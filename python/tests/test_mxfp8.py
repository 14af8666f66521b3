"""MXFP4 experts with MXFP8 activations (``activations="mxfp8"``) on moegen's SM100 simulator
(``kind::mxf8f6f4``): gpt-oss's tensors and moegen's own layout, bit-identical to moegen's
MXFP8 CPU reference, near a float64 MoE, and not what the bf16 (Hopper) layer computes."""

import numpy as np
import pytest

import moegen
from common import GptOssCase, Mxfp4Case, relative_l2

# The inputs (multiples of 1/8 up to 1.5) are exact in MXFP8: E4M3 keeps 4 significant bits
# and each 32-block's power-of-two scale puts its largest value in range. What is left is
# GEMM1's output h requantized to E4M3 per 32 (within 2^-4 relative, half an ulp of a 3-bit
# mantissa, for values in the normal range) and the 0.6 % of bf16 roundings that
# test_gpt_oss.py derives: about 7 % at worst, much less on average. A wrong row parity,
# expert or bias is off by tens of percent.
BOUND = 0.07


@pytest.fixture(scope="module")
def case():
    return GptOssCase(seed=31, hidden=128, inter=128)


@pytest.fixture(scope="module")
def layer(case):
    return moegen.MoeLayer.from_gpt_oss_mxfp4(
        **case.layer_args(), max_num_tokens=16, activations="mxfp8", keep_host_weights=True
    )


@pytest.fixture(scope="module")
def out(layer, case):
    return layer(case.x, case.ids, case.weights)


def test_runs_the_sm100_mxfp8_kernels(layer):
    assert (layer.arch, layer.activations, layer.device) == ("sm100", "mxfp8", "cpu")
    assert "activations='mxfp8'" in repr(layer)


def test_gpt_oss_equals_the_mxfp8_reference_bit_for_bit(layer, case, out):
    assert np.any(out != 0)
    np.testing.assert_array_equal(out, layer.reference(case.x, case.ids, case.weights))


def test_gpt_oss_is_near_a_float64_moe(case, out):
    err = relative_l2(out.astype(np.float64), case.float64_moe())
    print(f"relative L2 error vs float64: {err:.5f} (bound {BOUND})")
    assert err < BOUND


def test_differs_from_the_bf16_layer(case, out):
    # A silent fall-back to Hopper's kernels would pass the float64 bound, not this.
    a16 = moegen.MoeLayer.from_gpt_oss_mxfp4(**case.layer_args(), max_num_tokens=16)
    assert a16.activations == "bf16" and a16.arch == "sm90"
    assert not np.array_equal(out, a16(case.x, case.ids, case.weights))


def test_deterministic_finalize_is_bit_exact_too(case, out):
    det = moegen.MoeLayer.from_gpt_oss_mxfp4(
        **case.layer_args(), max_num_tokens=16, activations="mxfp8",
        use_fused_finalize=False, keep_host_weights=True,
    )
    assert det.deterministic
    again = det(case.x, case.ids, case.weights)
    np.testing.assert_array_equal(again, det.reference(case.x, case.ids, case.weights))
    # Two routes per token add in one order either way.
    np.testing.assert_array_equal(again, out)


def test_moegen_layout_mxfp4_with_mxfp8_activations():
    case = Mxfp4Case(seed=32, hidden=128, inter=128)
    layer = moegen.MoeLayer.from_mxfp4(**case.layer_args(), max_num_tokens=8,
                                       activations="mxfp8", keep_host_weights=True)
    assert (layer.arch, layer.activations) == ("sm100", "mxfp8")
    out = layer(case.x, case.ids, case.weights)
    assert np.any(out != 0)
    np.testing.assert_array_equal(out, layer.reference(case.x, case.ids, case.weights))
    err = relative_l2(out.astype(np.float64), case.float64_moe())
    print(f"relative L2 error vs float64: {err:.5f} (bound {BOUND})")
    assert err < BOUND


@pytest.mark.parametrize("value", ["fp8", "MXFP8", "nvfp4", ""])
def test_other_spellings_are_refused_naming_the_option(case, value):
    with pytest.raises(moegen.InputError,
                       match=rf'^activations: "{value}", expected "bf16" .* or "mxfp8"'):
        moegen.MoeLayer.from_gpt_oss_mxfp4(**case.layer_args(), max_num_tokens=4,
                                           activations=value)
    mx = Mxfp4Case(seed=33, hidden=128, inter=128)
    with pytest.raises(moegen.InputError, match=rf'^activations: "{value}"'):
        moegen.MoeLayer.from_mxfp4(**mx.layer_args(), max_num_tokens=4, activations=value)


def test_a_value_that_is_not_a_string_is_refused_naming_the_option(case):
    with pytest.raises(moegen.InputError, match=r'^activations: 8, expected "bf16" or "mxfp8"'):
        moegen.MoeLayer.from_gpt_oss_mxfp4(**case.layer_args(), max_num_tokens=4, activations=8)


def test_mxfp8_on_a_gpu_other_than_sm100_is_refused():
    # The check each constructor runs once the device is open (its arch known); on a GPU
    # this is what activations="mxfp8" on an H100 or H200 raises, before any upload.
    check = moegen._native._check_generation
    with pytest.raises(moegen.UnsupportedError,
                       match=r'^activations="mxfp8" on cuda:1 \(sm90\): .*SM100.*Hopper has none'):
        check("mxfp8", "sm90", "cuda:1")
    check("mxfp8", "sm100", "cuda:0")
    check("bf16", "sm90", "cuda:0")  # Hopper's path, as before
    with pytest.raises(moegen.InputError, match=r'^activations: "fp4"'):
        check("fp4", "sm100", "cuda:0")

