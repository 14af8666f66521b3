"""NVFP4 experts in FlashInfer's CuTe-DSL layouts, run on moegen's simulator (SM100
kernels): bit-identical to moegen's CPU reference, close to an independent float64 MoE."""

import numpy as np
import pytest

import moegen
from common import Nvfp4Case, relative_l2

# The float64 MoE does not requantize GEMM1's output h to NVFP4, the layer does: each
# element moves by at most half an E2M1 step, at most 1/4 of |h| above 2 * s and s/4
# below (s: its block's scale), with s * sqrt(16) <= 2/3 of the block's norm; so ||dh|| <=
# (1/4)(1 + 2/3) ||h|| ~ 0.42 ||h||, plus E4M3's rounding of s (2^-4). GEMM2 is linear, so
# the output's relative error is of that order: 0.5. A layout error (up/gate swapped, a
# scale swizzled wrongly, an expert shifted) gives errors around 1 or more.
BOUND = 0.5


@pytest.fixture(scope="module")
def case():
    return Nvfp4Case(seed=7)


@pytest.fixture(scope="module")
def layer(case):
    return moegen.MoeLayer.from_flashinfer_nvfp4(
        **case.layer_args(), max_num_tokens=16, keep_host_weights=True
    )


def test_layer_describes_itself(layer, case):
    assert (layer.hidden_size, layer.intermediate_size) == (case.h, case.i)
    assert (layer.num_experts, layer.num_local_experts, layer.top_k) == (case.e, case.e, case.k)
    assert layer.device == "cpu" and layer.arch == "sm100"
    assert layer.deterministic is False
    assert "T" in layer.tactic(case.n) or layer.tactic(case.n)


def test_equals_the_cpu_reference_bit_for_bit(layer, case):
    out = layer(case.x, case.ids, case.weights)
    assert out.shape == (case.n, case.h) and out.dtype == np.float32
    assert np.any(out != 0), "a non-trivial output"
    ref = layer.reference(case.x, case.ids, case.weights)
    np.testing.assert_array_equal(out, ref)


def test_is_close_to_an_independent_float64_moe(layer, case):
    out = layer(case.x, case.ids, case.weights)
    err = relative_l2(out.astype(np.float64), case.float64_moe())
    print(f"relative L2 error vs float64: {err:.4f} (bound {BOUND})")
    assert err < BOUND


def test_a_wrong_interleave_is_caught_by_the_float64_moe(case):
    # The check above can fail: the same experts with W1's up and gate blocks swapped.
    args = case.layer_args()
    w1 = case.w1.reshape(case.local, case.i // 64, 2, 64, -1)[:, :, ::-1].reshape(case.w1.shape)
    sf = case.sf1_linear.reshape(case.local, case.i // 64, 2, 64, -1)[:, :, ::-1]
    from common import mma_view, swizzle_128x4

    sf = np.stack([swizzle_128x4(s.reshape(2 * case.i, -1), 2 * case.i, case.h // 16) for s in sf])
    args.update(w1_weight=np.ascontiguousarray(w1),
                w1_weight_sf=mma_view(sf, case.local, 2 * case.i, case.h // 16))
    swapped = moegen.MoeLayer.from_flashinfer_nvfp4(**args, max_num_tokens=16)
    out = swapped(case.x, case.ids, case.weights)
    assert relative_l2(out.astype(np.float64), case.float64_moe()) > BOUND


def test_inputs_in_other_host_forms_give_the_same_bits(layer, case):
    out = layer(case.x, case.ids, case.weights)
    # bf16 bits as uint16, int64 ids, a DLPack producer.
    bits = (case.x.view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(layer(bits, case.ids.astype(np.int64), case.weights), out)

    class Producer:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    np.testing.assert_array_equal(
        layer(Producer(case.x), Producer(case.ids), Producer(case.weights)), out
    )


def test_scales_as_plain_bytes_and_as_float8_codes_load_the_same(case):
    args = case.layer_args()
    args.update(w1_weight_sf=case.sf1, w2_weight_sf=case.sf2.reshape(-1))
    layer = moegen.MoeLayer.from_flashinfer_nvfp4(**args, max_num_tokens=16)
    ref = moegen.MoeLayer.from_flashinfer_nvfp4(**case.layer_args(), max_num_tokens=16)
    np.testing.assert_array_equal(
        layer(case.x, case.ids, case.weights), ref(case.x, case.ids, case.weights)
    )


def test_deterministic_finalize_and_an_expert_window(case):
    # Rank 1 of 2: experts 2 and 3 of 4; routes to 0 and 1 are another rank's.
    win = Nvfp4Case(seed=11, offset=2, local=2)
    layer = moegen.MoeLayer.from_flashinfer_nvfp4(
        **win.layer_args(), max_num_tokens=8, use_fused_finalize=False, keep_host_weights=True
    )
    assert layer.deterministic and layer.local_expert_offset == 2
    out = layer(win.x, win.ids, win.weights)
    np.testing.assert_array_equal(out, layer.reference(win.x, win.ids, win.weights))
    assert relative_l2(out.astype(np.float64), win.float64_moe()) < BOUND
