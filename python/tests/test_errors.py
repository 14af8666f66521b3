"""Bad inputs are refused before they reach the layer, as moegen's exception classes with
moegen's messages naming the input."""

import numpy as np
import pytest

import moegen
from common import GptOssCase, Nvfp4Case


@pytest.fixture(scope="module")
def case():
    return Nvfp4Case(seed=5, tokens=3)


@pytest.fixture(scope="module")
def layer(case):
    return moegen.MoeLayer.from_flashinfer_nvfp4(**case.layer_args(), max_num_tokens=4)


def test_exception_classes():
    assert issubclass(moegen.InputError, moegen.MoegenError)
    assert issubclass(moegen.InputError, ValueError)
    assert issubclass(moegen.WeightError, ValueError)
    assert issubclass(moegen.RoutingError, moegen.LayerError)
    for c in (moegen.LayerError, moegen.DeviceError, moegen.UnsupportedError):
        assert issubclass(c, moegen.MoegenError)


def test_pass_inputs_are_refused_naming_the_input(layer, case):
    x, ids, w = case.x, case.ids, case.weights
    with pytest.raises(moegen.InputError, match=r"^x: dtype float64, expected bfloat16"):
        layer(x.astype(np.float64), ids, w)
    with pytest.raises(moegen.InputError, match=r"^x: shape \[3, 128\], expected \[num_tokens, 256\]"):
        layer(x[:, :128], ids, w)
    with pytest.raises(moegen.InputError, match=r"^token_selected_experts: shape \[2, 2\]"):
        layer(x, ids[:2], w)
    with pytest.raises(moegen.InputError, match=r"^token_selected_experts: dtype float32"):
        layer(x, ids.astype(np.float32), w)
    with pytest.raises(moegen.InputError, match=r"^token_final_scales: dtype float64, expected float32"):
        layer(x, ids, w.astype(np.float64))
    wide = ids.astype(np.int64)
    wide[1, 1] = (1 << 32) + 1  # an int32 cast would wrap it onto expert 1
    with pytest.raises(moegen.InputError, match=r"token 1 slot 1: id 4294967297 does not fit"):
        layer(x, wide, w)


def test_layer_refusals_carry_moegens_message(layer, case):
    many = np.zeros((5, case.h), dtype=np.float32)
    ids = np.zeros((5, case.k), dtype=np.int32)
    ids[:, 1] = 1
    with pytest.raises(moegen.LayerError, match=r"5 tokens exceed the workspace's planned maximum of 4"):
        layer(many, ids, np.ones((5, case.k), dtype=np.float32))


def test_device_side_routing_checks_name_token_and_slot(layer, case):
    bad = case.ids.copy()
    bad[2, 0] = case.e + 3
    with pytest.raises(moegen.RoutingError, match=r"^token 2 slot 0 routes to expert 7, outside \[0, 4\)"):
        layer(case.x, bad, case.weights)
    # The layer still runs afterwards.
    layer(case.x, case.ids, case.weights)


def test_bad_weights_are_refused_naming_the_tensor(case):
    args = case.layer_args()
    args["w2_weight"] = case.w2[:, :128]
    with pytest.raises(moegen.InputError, match=r"^w2_weight: shape \[4, 128, 128\], expected \[4, 256, 128\]"):
        moegen.MoeLayer.from_flashinfer_nvfp4(**args, max_num_tokens=4)
    args = case.layer_args()
    args["w1_weight_sf"] = case.sf1[:, :100]
    with pytest.raises(moegen.InputError, match=r"^w1_weight_sf: .*the 128x4 layout of \[512, 16\]"):
        moegen.MoeLayer.from_flashinfer_nvfp4(**args, max_num_tokens=4)
    args = case.layer_args()
    args["w1_alpha"] = case.alpha1.astype(np.float64)
    with pytest.raises(moegen.InputError, match=r"^w1_alpha: dtype float64, expected float32"):
        moegen.MoeLayer.from_flashinfer_nvfp4(**args, max_num_tokens=4)
    args = case.layer_args()
    nan = case.sf2.copy()
    nan[1, 7] = 0x7F  # E4M3's NaN code
    args["w2_weight_sf"] = nan
    with pytest.raises(moegen.WeightError, match=r"W2 scales"):
        moegen.MoeLayer.from_flashinfer_nvfp4(**args, max_num_tokens=4)


def test_gpt_oss_tensors_are_checked_by_moegens_loader():
    case = GptOssCase(seed=9, tokens=2)
    args = case.layer_args()
    args["down_proj_bias"] = case.down_bias[:, :100]
    with pytest.raises(moegen.WeightError, match=r"model\.layers\.0\.mlp\.experts\.down_proj_bias"):
        moegen.MoeLayer.from_gpt_oss_mxfp4(**args, max_num_tokens=4)
    args = case.layer_args()
    args["gate_up_proj_scales"] = case.gate_up_scales.astype(np.int16)
    with pytest.raises(moegen.WeightError, match=r"gate_up_proj_scales"):
        moegen.MoeLayer.from_gpt_oss_mxfp4(**args, max_num_tokens=4)


def test_a_shape_no_tactic_serves_says_why(case):
    # H 160: a multiple of the NVFP4 block, not of the SM100 MMA's K (64).
    small = Nvfp4Case(seed=1, hidden=160, inter=128, tokens=1)
    with pytest.raises(moegen.LayerError, match=r"no tactic of the kernel set applies"):
        moegen.MoeLayer.from_flashinfer_nvfp4(**small.layer_args(), max_num_tokens=4)


def test_devices_this_build_cannot_serve(case):
    with pytest.raises(moegen.UnsupportedError, match=r'device "metal"'):
        moegen.MoeLayer.from_flashinfer_nvfp4(**case.layer_args(), max_num_tokens=4, device="metal")
    if not moegen.cuda_built:
        with pytest.raises(moegen.UnsupportedError, match=r"without its `cuda` feature"):
            moegen.MoeLayer.from_flashinfer_nvfp4(
                **case.layer_args(), max_num_tokens=4, device="cuda:0"
            )


def test_reference_needs_the_host_weights(layer, case):
    with pytest.raises(moegen.UnsupportedError, match=r"keep_host_weights=True"):
        layer.reference(case.x, case.ids, case.weights)


def test_torch_is_not_imported_by_the_host_path():
    import sys

    assert "torch" not in sys.modules


def test_shape_arguments_are_refused_naming_them(case):
    build = moegen.MoeLayer.from_flashinfer_nvfp4
    with pytest.raises(moegen.InputError, match=r"^top_k must be positive"):
        build(**{**case.layer_args(), "top_k": 0}, max_num_tokens=4)
    with pytest.raises(moegen.InputError, match=r"^local experts \[3, 3\+4\) exceed the 4 experts"):
        build(**{**case.layer_args(), "local_expert_offset": 3}, max_num_tokens=4)
    with pytest.raises(moegen.InputError, match=r"^max_num_tokens: -1 is negative"):
        build(**case.layer_args(), max_num_tokens=-1)
    with pytest.raises(moegen.LayerError, match=r"does not fit the kernels' 32-bit indices"):
        build(**case.layer_args(), max_num_tokens=10**15)
    with pytest.raises(moegen.InputError, match=r"^w1_alpha: expert 0: 0 is not a positive finite"):
        build(**{**case.layer_args(), "w1_alpha": np.zeros(4, np.float32)}, max_num_tokens=4)
    with pytest.raises(moegen.WeightError, match=r"^fc2 input scale = NaN must be positive"):
        build(**{**case.layer_args(), "fc2_input_scale": float("nan")}, max_num_tokens=4)


def test_other_device_side_checks(layer, case):
    with pytest.raises(moegen.RoutingError, match=r"^token 0 slot 0: the router weight is NaN"):
        layer(case.x, case.ids, np.full(case.weights.shape, np.nan, np.float32))
    with pytest.raises(moegen.RoutingError, match=r"^token 0 slot 1 routes to expert 0, which slot 0"):
        layer(case.x, np.zeros_like(case.ids), case.weights)
    with pytest.raises(moegen.LayerError, match=r"^token count must be positive"):
        layer(np.zeros((0, case.h), np.float32), np.zeros((0, 2), np.int32),
              np.zeros((0, 2), np.float32))
