//! The SM100 MXFP8 × MXFP4 GEMMs' parameters (`kind::mxf8f6f4`; docs/sm100-mxf8f6f4.md): the
//! NVFP4 kernels' list with the formats' own maps and buffers, and no `fc2_input_scale`
//! (MXFP8 has no global scale). Kp(K) is K rounded up to 128: the weights' padded K.

use super::{ACTIVATION_PARAMS, GEMM1_BIAS, GEMM2_BIAS, buffer, map, scalar};
use crate::abi::param::{Buffer as B, Param, Scalar as S, TensorMap as M};

/// GEMM1's parameters (MXFP8 × MXFP4), then `extra`.
macro_rules! gemm1_mx_params {
    ($($extra:expr),* $(,)?) => {
        routing_tail!(
    map(
        "tmap_b",
        M::W1,
        "W1 [L, 2I, Kp(H)] e2m1 (ReLU²: I rows): 16U4_ALIGN16B (padded to a byte per code in shared memory), dims {Kp(H), rows, L}, box {128, N/cta_group, 1}, SWIZZLE_128B",
    ),
    map(
        "tmap_sfb",
        M::W1Scales,
        "W1 scales ue8m0, L × 128x4 blocks of [rows, Kp(H)/32]: UINT16, dims {256, Kp(H)/128, ceil(rows/128), L}, box {256, 1, ceil(N/128), 1} (2-CTA N 256: {256, 1, 1, 1}, each CTA its row block, multicast), no swizzle",
    ),
    map(
        "tmap_out",
        M::Gemm1OutputStore,
        "h [max_permuted_rows, I] e4m3: UINT8, dims {I, rows}, box {N/2, 32}, no swizzle",
    ),
    buffer("x", B::Activations, "activations [tokens, H] e4m3"),
    buffer("x_sf", B::ActivationScales, "activation scales ue8m0 [tokens, Kp(H)/32], linear"),
    buffer("out_sf", B::Gemm1OutputScales, "h scales ue8m0: 128x4 layout of [max_permuted_rows, Kp(I)/32]"),
    buffer("alpha", B::Alpha1, "α1 f32 [L]"),
            ; $($extra),*
        )
    };
}

/// GEMM1: gather + FC1 + activation + MXFP8 requantization.
pub const GEMM1_MX: &[Param] = gemm1_mx_params!();
/// [`GEMM1_MX`] with the activation's parameters.
pub const GEMM1_MX_ACT: &[Param] = gemm1_mx_params!(ACTIVATION_PARAMS);
/// [`GEMM1_MX`] with its bias.
pub const GEMM1_MX_BIAS: &[Param] = gemm1_mx_params!(GEMM1_BIAS);
/// [`GEMM1_MX`] with the activation's parameters and its bias.
pub const GEMM1_MX_ACT_BIAS: &[Param] = gemm1_mx_params!(ACTIVATION_PARAMS, GEMM1_BIAS);

/// The GEMM2 parameters before the output (both finalize modes).
macro_rules! gemm2_mx_params {
    ($out:expr $(, $extra:expr)* $(,)?) => {
        routing_tail!(
            map(
                "tmap_a",
                M::Gemm1OutputLoad,
                "h [max_permuted_rows, I] e4m3: UINT8, dims {I, rows}, box {128, 128}, SWIZZLE_128B",
            ),
            map(
                "tmap_sfa",
                M::Gemm1OutputScales,
                "h scales (128x4, ue8m0): UINT16, dims {256, Kp(I)/128, rows/128}, box {256, 1, 1}, no swizzle",
            ),
            map(
                "tmap_b",
                M::W2,
                "W2 [L, H, Kp(I)] e2m1: 16U4_ALIGN16B, dims {Kp(I), H, L}, box {128, N/cta_group, 1}, SWIZZLE_128B",
            ),
            map(
                "tmap_sfb",
                M::W2Scales,
                "W2 scales ue8m0, L × 128x4 blocks of [H, Kp(I)/32]: UINT16, dims {256, Kp(I)/128, ceil(H/128), L}, box {256, 1, ceil(N/128), 1} (2-CTA N 256: {256, 1, 1, 1}, multicast), no swizzle",
            ),
            buffer("alpha", B::Alpha2, "α2 f32 [L]"),
            buffer("router_weights", B::RouterWeights, "router weights f32 [tokens, top_k]"),
            $out,
            ; $($extra),*
        )
    };
}

/// The bulk reduce-add output.
const BULK_OUT: Param =
    buffer("out", B::Output, "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added");
/// The deterministic finalize's per-route rows.
const SCRATCH_OUT: Param = buffer(
    "out",
    B::FinalizeScratch,
    "scratch bf16 [tokens·top_k, H]; local routes' rows are written",
);

/// GEMM2 (MXFP8 × MXFP4) with the bulk reduce-add finalize.
pub const GEMM2_MX: &[Param] = gemm2_mx_params!(BULK_OUT);
/// [`GEMM2_MX`] with its bias.
pub const GEMM2_MX_BIAS: &[Param] = gemm2_mx_params!(BULK_OUT, GEMM2_BIAS);
/// GEMM2 (MXFP8 × MXFP4) writing per-route rows for the deterministic finalize.
pub const GEMM2_MX_DETERMINISTIC: &[Param] = gemm2_mx_params!(SCRATCH_OUT);
/// [`GEMM2_MX_DETERMINISTIC`] with its bias.
pub const GEMM2_MX_DETERMINISTIC_BIAS: &[Param] = gemm2_mx_params!(SCRATCH_OUT, GEMM2_BIAS);
