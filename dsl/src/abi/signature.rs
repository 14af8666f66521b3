//! Every kernel's parameter list, in ABI order. Codegen declares exactly these, the runtime
//! binds exactly these, and the manifest lists them: this file is the one place a kernel's
//! interface is written.

use super::param::{Buffer as B, Param, ParamKind, ParamType, Scalar as S, TensorMap as M};

const fn scalar(name: &'static str, s: S, meaning: &'static str) -> Param {
    Param { name, kind: ParamKind::Scalar(s), meaning }
}
const fn buffer(name: &'static str, b: B, meaning: &'static str) -> Param {
    Param { name, kind: ParamKind::Buffer(b), meaning }
}
const fn map(name: &'static str, m: M, meaning: &'static str) -> Param {
    Param { name, kind: ParamKind::TensorMap(m), meaning }
}
const fn raw(name: &'static str, t: ParamType, meaning: &'static str) -> Param {
    Param { name, kind: ParamKind::Validation(t), meaning }
}

/// The routing-tile parameters every GEMM reads, after its own (`head`), then the epilogue's
/// optional buffers (`; extra`).
macro_rules! routing_tail {
    ($($head:expr),* $(,)? $(; $($extra:expr),* $(,)?)?) => {
        &[
            $($head,)*
            buffer(
                "tile_idx_to_expert_idx",
                B::TileIdxToExpertIdx,
                "i32 [max_tiles] from the routing sort",
            ),
            buffer(
                "tile_idx_to_mn_limit",
                B::TileIdxToMnLimit,
                "i32 [max_tiles] from the routing sort",
            ),
            buffer(
                "permuted_idx_to_expanded_idx",
                B::PermutedIdxToExpandedIdx,
                "i32 [max_tiles·T]: token·top_k + slot of each valid row",
            ),
            buffer("num_non_exiting_tiles", B::NumNonExitingTiles, "i32 [1]: live routing tiles"),
            scalar("hidden", S::Hidden, "H"),
            scalar("intermediate", S::Intermediate, "I"),
            scalar("top_k", S::TopK, "routes per token"),
            scalar("max_tiles", S::MaxTiles, "length of the tile arrays (sizes the static schedule)"),
            scalar(
                "live_mask_lo",
                S::LiveTileMaskLo,
                "bit L (0–31): do the units when L tiles are live, else none (all ones: always)",
            ),
            scalar(
                "live_mask_hi",
                S::LiveTileMaskHi,
                "bits 32–63 of the live-tile mask; bit 31 stands for 63 or more",
            ),
            $($($extra,)*)?
        ]
    };
}

/// GEMM1's activation parameters (`Activation::has_params`).
const ACTIVATION_PARAMS: Param =
    buffer("activation_params", B::ActivationParams, "f32 [L, 4]: α, β, limit, 0 per expert");
/// GEMM1's bias (`GemmKey::bias`).
const GEMM1_BIAS: Param = buffer(
    "bias",
    B::Gemm1Bias,
    "f32 [L, 2I]: per expert the up rows' I values, then the gate rows'",
);
/// GEMM2's bias (`GemmKey::bias`).
const GEMM2_BIAS: Param = buffer("bias", B::Gemm2Bias, "f32 [L, H] per expert");

/// GEMM1's parameters (SM100), then `extra`.
macro_rules! gemm1_params {
    ($($extra:expr),* $(,)?) => {
        routing_tail!(
    map(
        "tmap_b",
        M::W1,
        "W1 [L, 2I, H] e2m1: 16U4_ALIGN8B, dims {H, 2I, L}, box {256, N/cta_group, 1}, SWIZZLE_128B",
    ),
    map(
        "tmap_sfb",
        M::W1Scales,
        "W1 scales, L × 128x4 blocks: UINT16, dims {256, H/64, ceil(2I/128), L}, box {256, 4, ceil(N/128), 1} (2-CTA: half, multicast: {256, 2, 1, 1} at N 128, {256, 4, 1, 1} at N 256), no swizzle",
    ),
    map(
        "tmap_out",
        M::Gemm1OutputStore,
        "h [max_permuted_rows, I] e2m1: 16U4_ALIGN8B, dims {I, rows}, box {N/2, 32}, no swizzle",
    ),
    buffer("x", B::Activations, "activations [tokens, H/2] e2m1x2"),
    buffer("x_sf", B::ActivationScales, "activation scales [tokens, H/16] ue4m3, linear"),
    buffer("out_sf", B::Gemm1OutputScales, "h scales: 128x4 layout of [max_permuted_rows, I/16]"),
    buffer("alpha", B::Alpha1, "α1 f32 [L]"),
    buffer("out_global_scale", B::Fc2InputScale, "fc2_input_scale: f32 [1] (device)"),
            ; $($extra),*
        )
    };
}

/// GEMM1: gather + FC1 + SwiGLU + NVFP4 requantization.
pub const GEMM1: &[Param] = gemm1_params!();
/// [`GEMM1`] with the activation's parameters.
pub const GEMM1_ACT: &[Param] = gemm1_params!(ACTIVATION_PARAMS);
/// [`GEMM1`] with its bias.
pub const GEMM1_WITH_BIAS: &[Param] = gemm1_params!(GEMM1_BIAS);
/// [`GEMM1`] with the activation's parameters and its bias.
pub const GEMM1_ACT_BIAS: &[Param] = gemm1_params!(ACTIVATION_PARAMS, GEMM1_BIAS);

/// The GEMM2 parameters before the output (both finalize modes).
macro_rules! gemm2_params {
    ($out:expr $(, $extra:expr)* $(,)?) => {
        routing_tail!(
            map(
                "tmap_a",
                M::Gemm1OutputLoad,
                "h [max_permuted_rows, I] e2m1: 16U4_ALIGN8B, dims {I, rows}, box {256, 128}, SWIZZLE_128B",
            ),
            map(
                "tmap_sfa",
                M::Gemm1OutputScales,
                "h scales (128x4): UINT16, dims {256, I/64, rows/128}, box {256, 4, 1}, no swizzle",
            ),
            map(
                "tmap_b",
                M::W2,
                "W2 [L, H, I] e2m1: 16U4_ALIGN8B, dims {I, H, L}, box {256, N/cta_group, 1}, SWIZZLE_128B",
            ),
            map(
                "tmap_sfb",
                M::W2Scales,
                "W2 scales, L × 128x4 blocks: UINT16, dims {256, I/64, ceil(H/128), L}, box {256, 4, ceil(N/128), 1} (2-CTA: half, multicast: {256, 2, 1, 1} at N 128, {256, 4, 1, 1} at N 256), no swizzle",
            ),
            buffer("alpha", B::Alpha2, "α2 f32 [L]"),
            buffer("router_weights", B::RouterWeights, "router weights f32 [tokens, top_k]"),
            $out,
            ; $($extra),*
        )
    };
}

/// GEMM2 with the bulk reduce-add finalize.
pub const GEMM2: &[Param] = gemm2_params!(buffer(
    "out",
    B::Output,
    "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added"
));

/// GEMM2 writing per-route rows for the deterministic finalize.
pub const GEMM2_DETERMINISTIC: &[Param] = gemm2_params!(buffer(
    "out",
    B::FinalizeScratch,
    "scratch bf16 [tokens·top_k, H]; local routes' rows are written"
));

/// [`GEMM2`] with its bias.
pub const GEMM2_WITH_BIAS: &[Param] = gemm2_params!(
    buffer("out", B::Output, "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added"),
    GEMM2_BIAS
);

/// [`GEMM2_DETERMINISTIC`] with its bias.
pub const GEMM2_DETERMINISTIC_BIAS: &[Param] = gemm2_params!(
    buffer(
        "out",
        B::FinalizeScratch,
        "scratch bf16 [tokens·top_k, H]; local routes' rows are written"
    ),
    GEMM2_BIAS
);

/// The routing sort's first pass.
pub const MOE_SORT_HISTOGRAM: &[Param] = &[
    buffer("experts", B::RoutedExperts, "i32 [tokens·top_k] global expert ids"),
    buffer("router_weights", B::RouterWeights, "f32 [tokens·top_k]: checked finite"),
    scalar("num_routes", S::NumRoutes, "tokens·top_k"),
    scalar("top_k", S::TopK, "routes per token: a token's slots must name distinct experts"),
    scalar("num_experts", S::NumExperts, "experts in the model"),
    scalar("local_offset", S::LocalOffset, "first local expert"),
    scalar("local_experts", S::LocalExperts, "L"),
    scalar("accept_padding", S::AcceptPadding, "1: NO_ROUTE is skipped; 0: out of range"),
    buffer(
        "block_counts",
        B::SortBlockCounts,
        "i32 [ceil(routes/1024) · L] scratch: counts, then bases",
    ),
    buffer("error_flags", B::ErrorFlags, "u32 [7]: the error record (abi::error_record)"),
];

/// The routing sort's second pass (one block).
pub const MOE_SORT_OFFSETS: &[Param] = &[
    scalar("num_blocks", S::SortBlocks, "histogram blocks: ceil(routes/1024)"),
    scalar("local_experts", S::LocalExperts, "L"),
    scalar("tile_size", S::TileSize, "T: 128 or 256"),
    scalar("max_tiles", S::MaxTiles, "length of the tile arrays"),
    buffer("block_counts", B::SortBlockCounts, "i32 [num_blocks · L]: counts in, bases out"),
    buffer("tile_idx_to_expert_idx", B::TileIdxToExpertIdx, "i32 [max_tiles] out"),
    buffer("tile_idx_to_mn_limit", B::TileIdxToMnLimit, "i32 [max_tiles] out"),
    buffer(
        "permuted_idx_to_expanded_idx",
        B::PermutedIdxToExpandedIdx,
        "i32 [max_tiles·T] out: −1 on padding rows",
    ),
    buffer("num_non_exiting_tiles", B::NumNonExitingTiles, "i32 [1] out"),
    buffer("total_num_padded_tokens", B::TotalNumPaddedTokens, "i32 [1] out"),
    buffer("error_flags", B::ErrorFlags, "u32 [7]: the error record (abi::error_record)"),
];

/// The routing sort's third pass.
pub const MOE_SORT_SCATTER: &[Param] = &[
    buffer("experts", B::RoutedExperts, "i32 [tokens·top_k] global expert ids"),
    scalar("num_routes", S::NumRoutes, "tokens·top_k"),
    scalar("top_k", S::TopK, "routes per token: a token's slots must name distinct experts"),
    scalar("num_experts", S::NumExperts, "experts in the model"),
    scalar("local_offset", S::LocalOffset, "first local expert"),
    scalar("local_experts", S::LocalExperts, "L"),
    scalar("accept_padding", S::AcceptPadding, "1: NO_ROUTE is skipped; 0: out of range"),
    buffer(
        "block_counts",
        B::SortBlockCounts,
        "i32 [ceil(routes/1024) · L] scratch: counts, then bases",
    ),
    buffer("expanded_idx_to_permuted_idx", B::ExpandedIdxToPermutedIdx, "i32 [tokens·top_k] out"),
    buffer(
        "permuted_idx_to_expanded_idx",
        B::PermutedIdxToExpandedIdx,
        "i32 [max_tiles·T] out (valid rows)",
    ),
    scalar("max_permuted_rows", S::MaxPermutedRows, "max_tiles·T: rows past it are never written"),
    buffer("error_flags", B::ErrorFlags, "u32 [7]: the error record (abi::error_record)"),
];

/// The whole routing sort in one block (at most 1024 routes): the three passes' inputs and
/// outputs, without their per-block scratch.
pub const MOE_SORT_SINGLE: &[Param] = &[
    buffer("experts", B::RoutedExperts, "i32 [tokens·top_k] global expert ids"),
    buffer("router_weights", B::RouterWeights, "f32 [tokens·top_k]: checked finite"),
    scalar("num_routes", S::NumRoutes, "tokens·top_k, at most 1024"),
    scalar("top_k", S::TopK, "routes per token: a token's slots must name distinct experts"),
    scalar("num_experts", S::NumExperts, "experts in the model"),
    scalar("local_offset", S::LocalOffset, "first local expert"),
    scalar("local_experts", S::LocalExperts, "L"),
    scalar("accept_padding", S::AcceptPadding, "1: NO_ROUTE is skipped; 0: out of range"),
    scalar("tile_size", S::TileSize, "T: 128 or 256"),
    scalar("max_tiles", S::MaxTiles, "length of the tile arrays"),
    buffer("tile_idx_to_expert_idx", B::TileIdxToExpertIdx, "i32 [max_tiles] out"),
    buffer("tile_idx_to_mn_limit", B::TileIdxToMnLimit, "i32 [max_tiles] out"),
    buffer(
        "permuted_idx_to_expanded_idx",
        B::PermutedIdxToExpandedIdx,
        "i32 [max_tiles·T] out: the route of each valid row, −1 on padding rows",
    ),
    buffer("num_non_exiting_tiles", B::NumNonExitingTiles, "i32 [1] out"),
    buffer("total_num_padded_tokens", B::TotalNumPaddedTokens, "i32 [1] out"),
    buffer("expanded_idx_to_permuted_idx", B::ExpandedIdxToPermutedIdx, "i32 [tokens·top_k] out"),
    scalar("max_permuted_rows", S::MaxPermutedRows, "max_tiles·T: rows past it are never written"),
    buffer("error_flags", B::ErrorFlags, "u32 [7]: the error record (abi::error_record)"),
];

/// bf16 activations → NVFP4 with linear scales.
pub const QUANTIZE_NVFP4: &[Param] = &[
    buffer("x", B::ActivationsBf16, "activations bf16 [tokens, H]"),
    buffer("out", B::Activations, "e2m1x2 [tokens, H/2]"),
    buffer("out_sf", B::ActivationScales, "ue4m3 [tokens, H/16], linear"),
    buffer(
        "global_scale",
        B::ActivationGlobalScale,
        "f32 [1] (device): the activations' global scale",
    ),
    scalar("tokens", S::Tokens, "rows"),
    scalar("hidden", S::Hidden, "H, a multiple of 16"),
];

/// bf16 activations → MXFP8 with linear scales (SM100).
pub const QUANTIZE_MXFP8: &[Param] = &[
    buffer("x", B::ActivationsBf16, "activations bf16 [tokens, H]"),
    buffer("out", B::Activations, "e4m3 [tokens, H]"),
    buffer(
        "out_sf",
        B::ActivationScales,
        "ue8m0 [tokens, Kp(H)/32], linear (Kp(H): H rounded up to 128); blocks past H are 0",
    ),
    scalar("tokens", S::Tokens, "rows"),
    scalar("hidden", S::Hidden, "H, a multiple of 64"),
];

/// The deterministic finalize's fixed-order sum.
pub const FINALIZE_REDUCE: &[Param] = &[
    buffer("scratch", B::FinalizeScratch, "bf16 [tokens·top_k, H] from the deterministic GEMM2"),
    buffer(
        "expanded_idx_to_permuted_idx",
        B::ExpandedIdxToPermutedIdx,
        "i32 [tokens·top_k]: −1 marks non-local routes",
    ),
    buffer("out", B::Output, "bf16 [tokens, H] out"),
    scalar("tokens", S::Tokens, "rows"),
    scalar("hidden", S::Hidden, "H, even"),
    scalar("top_k", S::TopK, "routes per token"),
];

/// Expert-parallel dispatch pack (one block): each route's slot in its owner's block.
pub const EP_DISPATCH_PACK: &[Param] = &[
    buffer("experts", B::RoutedExperts, "i32 [tokens·top_k] global expert ids"),
    buffer("router_weights", B::RouterWeights, "f32 [tokens·top_k]: checked finite"),
    scalar("num_routes", S::NumRoutes, "tokens·top_k"),
    scalar("top_k", S::TopK, "routes per token: a token's slots must name distinct experts"),
    scalar("num_experts", S::NumExperts, "E = G·L"),
    scalar("local_experts", S::LocalExperts, "L: experts per rank (peer of id e: e / L)"),
    scalar("per_peer", S::PerPeer, "C: slots per peer block"),
    buffer("send_experts", B::EpSendExperts, "i32 [G·C] out: ids, NO_ROUTE on padding"),
    buffer("send_weights", B::EpSendWeights, "f32 [G·C] out: weights, 0 on padding"),
    buffer("sent_routes", B::EpSentRoutes, "i32 [G·C] out: expanded indices, −1 on padding"),
    buffer("peer_counts", B::EpPeerCounts, "u32 [G] out: routes packed per peer"),
    buffer("error_flags", B::ErrorFlags, "u32 [7]: the error record (abi::error_record)"),
];

/// Expert-parallel dispatch: each send slot's activation row.
pub const EP_GATHER_ROWS: &[Param] = &[
    buffer("sent_routes", B::EpSentRoutes, "i32 [slots]: expanded indices, −1 on padding"),
    buffer("x", B::ActivationsBf16, "activations bf16 [num_routes/top_k, H]"),
    buffer("out", B::EpSendRows, "bf16 [slots, H] out: zeros on padding"),
    scalar("slots", S::Tokens, "G·C"),
    scalar("hidden", S::Hidden, "H, even"),
    scalar("top_k", S::TopK, "routes per token"),
    scalar("num_routes", S::NumRoutes, "tokens·top_k: larger indices are treated as padding"),
];

/// Expert-parallel combine: each returned row to its expanded index on the home rank.
pub const EP_COMBINE_UNPACK: &[Param] = &[
    buffer("sent_routes", B::EpSentRoutes, "i32 [slots]: expanded indices, −1 on padding"),
    buffer("recv", B::EpCombineRecv, "bf16 [slots, H]: the owners' rows"),
    buffer("out", B::FinalizeScratch, "bf16 [num_routes, H] out: the home rank's route rows"),
    scalar("slots", S::Tokens, "G·C"),
    scalar("hidden", S::Hidden, "H, even"),
    scalar("num_routes", S::NumRoutes, "tokens·top_k: larger indices are skipped"),
];

/// Differential corpus: ALU and conversions.
pub const CORPUS_ALU: &[Param] = &[
    raw("a", ParamType::U64, "f32 [64]"),
    raw("b", ParamType::U64, "f32 [64]"),
    raw("u", ParamType::U64, "u32 [64]"),
    raw("out", ParamType::U64, "u32 [64 · 16] out"),
];

/// Differential corpus: a cp.async → mbarrier pipeline.
pub const CORPUS_PIPELINE: &[Param] =
    &[raw("src", ParamType::U64, "u8 [8 · 512]"), raw("out", ParamType::U64, "u32 [64] out")];

/// Differential corpus: TMA loads in every swizzle mode and a tile store.
pub const CORPUS_TMA: &[Param] = &[
    raw("tmap0", ParamType::TensorMap, "UINT8 2-D, swizzle none, box {16, 8}"),
    raw("tmap1", ParamType::TensorMap, "UINT8 2-D, swizzle 32B, box {32, 8}"),
    raw("tmap2", ParamType::TensorMap, "UINT8 2-D, swizzle 64B, box {64, 8}"),
    raw("tmap3", ParamType::TensorMap, "UINT8 2-D, swizzle 128B, box {128, 8}"),
    raw("tmap_store", ParamType::TensorMap, "UINT8 2-D, swizzle 128B, box {128, 8}: store target"),
    raw("c0", ParamType::U32, "box coordinate 0 (signed)"),
    raw("c1", ParamType::U32, "box coordinate 1 (signed)"),
    raw("s0", ParamType::U32, "store coordinate 0 (non-negative)"),
    raw("s1", ParamType::U32, "store coordinate 1 (non-negative)"),
    raw("out", ParamType::U64, "u8 [4 · 1024] out: the raw shared bytes of each box"),
];

/// Differential corpus: cluster multicast, remote arrive, bulk copies and reductions.
pub const CORPUS_CLUSTER: &[Param] = &[
    raw("tmap", ParamType::TensorMap, "UINT16 2-D, box {256, 2}, no swizzle"),
    raw("out", ParamType::U64, "bf16 [512] in/out: reduce-added twice"),
    raw(
        "counters",
        ParamType::U64,
        "u32 [2] in/out: red.add of 1 per thread, atom.max of the thread id",
    ),
    raw("copy_out", ParamType::U64, "u8 [2 · 1024] out: each CTA's box, bulk-copied"),
];

/// Differential corpus: shuffles, votes, reductions and named barriers.
pub const CORPUS_WARP: &[Param] =
    &[raw("input", ParamType::U64, "u32 [128]"), raw("out", ParamType::U64, "u32 [128 · 16] out")];

/// Differential corpus: one warpgroup's wgmma on a dequantized NVFP4 tile.
pub const CORPUS_WGMMA: &[Param] = &[
    raw(
        "w",
        ParamType::U64,
        "u8 [2048 + 256]: a 64 × 64 NVFP4 tile in the sm90 fragment layout, then its scales",
    ),
    raw("x", ParamType::U64, "bf16 [32, 64]: the activations, one K-contiguous row per token"),
    raw("out", ParamType::U64, "f32 [128 · 16] out: each thread's accumulator registers"),
    raw("a_out", ParamType::U64, "u32 [128 · 16] out: each thread's A registers, K16 step-major"),
];

/// Differential corpus: the MUFU sweep (`abi::mufu_sweep`).
pub const CORPUS_MUFU: &[Param] = &[
    raw(
        "out",
        ParamType::U64,
        "u32 [count · 4] out: per input, ex2.approx.ftz, ex2.approx, rcp.approx.ftz, rcp.approx",
    ),
    raw("base", ParamType::U32, "f32 bit pattern of input 0"),
    raw("step", ParamType::U32, "input i is base + i·step (wrapping)"),
    raw("count", ParamType::U32, "inputs"),
];

/// Hopper GEMM1 over bf16 activations (A16): gather + FC1 + SwiGLU, bf16 h.
macro_rules! sm90_gemm1_a16 {
    ($($extra:expr),* $(,)?) => {
        routing_tail!(
    buffer("w1", B::W1, "W1 [L, 2I, H] e2m1 in wgmma A-fragment order (abi::sm90_weights)"),
    buffer(
        "w1_sf",
        B::W1Scales,
        "W1 scales, one byte per scale block, fragment order (abi::sm90_weights::scale_position): ue4m3 per 16 (NVFP4), or per 32 for MXFP4 the bf16 exponent field of 2^126 · scale · 2^-rho (abi::sm90_weights::mxfp4_scale_field)"
    ),
    buffer("x", B::ActivationsBf16, "activations bf16 [tokens, H], gathered per routed row"),
    buffer("out", B::Gemm1OutputBf16, "h bf16 [max_permuted_rows, I]"),
    buffer("alpha", B::Alpha1, "α1 f32 [L]: 1 / weight global scale for A16 NVFP4, times 2^rho of the expert's MXFP4 W1 (Sm90Weights::kernel_alphas)"),
    buffer("out_global_scale", B::Fc2InputScale, "fc2_input_scale: f32 [1] (unused for A16)"),
            $($extra,)*
        )
    };
}

/// Hopper GEMM1 over bf16 activations (A16): plain SwiGLU, no bias.
pub const SM90_GEMM1_A16: &[Param] = sm90_gemm1_a16!();
/// [`SM90_GEMM1_A16`] with the activation's parameters.
pub const SM90_GEMM1_A16_ACT: &[Param] = sm90_gemm1_a16!(ACTIVATION_PARAMS);
/// [`SM90_GEMM1_A16`] with GEMM1's bias.
pub const SM90_GEMM1_A16_BIAS: &[Param] = sm90_gemm1_a16!(GEMM1_BIAS);
/// [`SM90_GEMM1_A16`] with the activation's parameters and GEMM1's bias.
pub const SM90_GEMM1_A16_ACT_BIAS: &[Param] = sm90_gemm1_a16!(ACTIVATION_PARAMS, GEMM1_BIAS);

/// Hopper GEMM1 over NVFP4 activations dequantized exactly (A4): h requantized to NVFP4 and
/// stored dequantized.
macro_rules! sm90_gemm1_a4 {
    ($($extra:expr),* $(,)?) => {
        routing_tail!(
    buffer("w1", B::W1, "W1 [L, 2I, H] e2m1 in wgmma A-fragment order (abi::sm90_weights)"),
    buffer(
        "w1_sf",
        B::W1Scales,
        "W1 scales, one byte per scale block, fragment order (abi::sm90_weights::scale_position): ue4m3 per 16 (NVFP4), or per 32 for MXFP4 the bf16 exponent field of 2^126 · scale · 2^-rho (abi::sm90_weights::mxfp4_scale_field)"
    ),
    buffer(
        "x",
        B::ActivationsDequantized,
        "e2m1 · scale of the NVFP4 activations, bf16 [tokens, H]"
    ),
    buffer(
        "out",
        B::Gemm1OutputBf16,
        "e2m1 · scale of the requantized h, bf16 [max_permuted_rows, I]"
    ),
    buffer("alpha", B::Alpha1, "α1 f32 [L] (1 / (gs_x · gs_w1))"),
    buffer("out_global_scale", B::Fc2InputScale, "fc2_input_scale: f32 [1] (device)"),
            $($extra,)*
        )
    };
}

/// Hopper GEMM1 over NVFP4 activations (A4): plain SwiGLU, no bias.
pub const SM90_GEMM1_A4: &[Param] = sm90_gemm1_a4!();
/// [`SM90_GEMM1_A4`] with the activation's parameters.
pub const SM90_GEMM1_A4_ACT: &[Param] = sm90_gemm1_a4!(ACTIVATION_PARAMS);
/// [`SM90_GEMM1_A4`] with GEMM1's bias.
pub const SM90_GEMM1_A4_BIAS: &[Param] = sm90_gemm1_a4!(GEMM1_BIAS);
/// [`SM90_GEMM1_A4`] with the activation's parameters and GEMM1's bias.
pub const SM90_GEMM1_A4_ACT_BIAS: &[Param] = sm90_gemm1_a4!(ACTIVATION_PARAMS, GEMM1_BIAS);

/// Hopper GEMM1 over E4M3 activations (A8, MXFP4 weights expanded to E4M3): bf16 h.
macro_rules! sm90_gemm1_a8 {
    ($($extra:expr),* $(,)?) => {
        routing_tail!(
    buffer("w1", B::W1, "W1 [L, 2I, Hp] e2m1 in the A8 fragment order (abi::sm90_weights)"),
    buffer(
        "w1_sf",
        B::W1Scales,
        "W1 block tables: one byte per row and 32 (the E4M3 table's offset), fragment order"
    ),
    buffer("w1_rows", B::W1RowScales, "f32 [L, 2I]: 2^ρ of each W1 row"),
    buffer("x", B::ActivationsFp8, "e4m3 [tokens, Hp], gathered per routed row"),
    buffer("x_scales", B::ActivationRowScales, "f32 [max_permuted_rows]: 2^e per row"),
    buffer("out", B::Gemm1OutputBf16, "h bf16 [max_permuted_rows, I]"),
    buffer("alpha", B::Alpha1, "α1 f32 [L]"),
            $($extra,)*
        )
    };
}

/// Hopper GEMM1 over E4M3 activations (A8): plain SwiGLU, no bias.
pub const SM90_GEMM1_A8: &[Param] = sm90_gemm1_a8!();
/// [`SM90_GEMM1_A8`] with the activation's parameters.
pub const SM90_GEMM1_A8_ACT: &[Param] = sm90_gemm1_a8!(ACTIVATION_PARAMS);
/// [`SM90_GEMM1_A8`] with GEMM1's bias.
pub const SM90_GEMM1_A8_BIAS: &[Param] = sm90_gemm1_a8!(GEMM1_BIAS);
/// [`SM90_GEMM1_A8`] with the activation's parameters and GEMM1's bias.
pub const SM90_GEMM1_A8_ACT_BIAS: &[Param] = sm90_gemm1_a8!(ACTIVATION_PARAMS, GEMM1_BIAS);

/// The Hopper A8 GEMM2 parameters before the output.
macro_rules! sm90_gemm2_a8 {
    ($out:expr $(, $extra:expr)* $(,)?) => {
        routing_tail!(
            map(
                "tmap_a",
                M::Gemm1HiddenFp8Load,
                "h e4m3 [max_permuted_rows, Ip]: UINT8, dims {Ip, rows}, box {128, T}, SWIZZLE_128B",
            ),
            buffer("w2", B::W2, "W2 [L, H, Ip] e2m1 in the A8 fragment order (abi::sm90_weights)"),
            buffer("w2_sf", B::W2Scales, "W2 block tables: one byte per row and 32, fragment order"),
            buffer("w2_rows", B::W2RowScales, "f32 [L, H]: 2^ρ of each W2 row"),
            buffer("h_scales", B::Gemm1OutputRowScales, "f32 [max_permuted_rows]: 2^e per row"),
            buffer("alpha", B::Alpha2, "α2 f32 [L]"),
            buffer("router_weights", B::RouterWeights, "router weights f32 [tokens, top_k]"),
            $out,
            $($extra,)*
        )
    };
}

/// Hopper A8 GEMM2 with the bulk reduce-add finalize.
pub const SM90_GEMM2_A8: &[Param] = sm90_gemm2_a8!(buffer(
    "out",
    B::Output,
    "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added"
));

/// [`SM90_GEMM2_A8`] with GEMM2's bias.
pub const SM90_GEMM2_A8_BIAS: &[Param] = sm90_gemm2_a8!(
    buffer("out", B::Output, "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added"),
    GEMM2_BIAS
);

/// Hopper A8 GEMM2 writing per-route rows for the deterministic finalize.
pub const SM90_GEMM2_A8_DETERMINISTIC: &[Param] = sm90_gemm2_a8!(buffer(
    "out",
    B::FinalizeScratch,
    "scratch bf16 [tokens·top_k, H]; local routes' rows are written"
));

/// [`SM90_GEMM2_A8_DETERMINISTIC`] with GEMM2's bias.
pub const SM90_GEMM2_A8_DETERMINISTIC_BIAS: &[Param] = sm90_gemm2_a8!(
    buffer(
        "out",
        B::FinalizeScratch,
        "scratch bf16 [tokens·top_k, H]; local routes' rows are written"
    ),
    GEMM2_BIAS
);

/// The Hopper GEMM2 parameters before the output.
macro_rules! sm90_gemm2 {
    ($out:expr $(, $extra:expr)* $(,)?) => {
        routing_tail!(
            map(
                "tmap_a",
                M::Gemm1HiddenLoad,
                "h bf16 [max_permuted_rows, I]: UINT16, dims {I, rows}, box {64, T}, SWIZZLE_128B",
            ),
            buffer("w2", B::W2, "W2 [L, H, I] e2m1 in wgmma A-fragment order (abi::sm90_weights)"),
            buffer("w2_sf", B::W2Scales, "W2 scales, one byte per scale block, fragment order (abi::sm90_weights::scale_position): ue4m3 per 16 (NVFP4), or per 32 for MXFP4 the bf16 exponent field of 2^126 · scale · 2^-rho (abi::sm90_weights::mxfp4_scale_field)"),
            buffer("alpha", B::Alpha2, "α2 f32 [L], times 2^rho of the expert's MXFP4 W2 (Sm90Weights::kernel_alphas)"),
            buffer("router_weights", B::RouterWeights, "router weights f32 [tokens, top_k]"),
            $out,
            $($extra,)*
        )
    };
}

/// Hopper GEMM2 with the bulk reduce-add finalize.
pub const SM90_GEMM2: &[Param] = sm90_gemm2!(buffer(
    "out",
    B::Output,
    "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added"
));

/// [`SM90_GEMM2`] with GEMM2's bias.
pub const SM90_GEMM2_BIAS: &[Param] = sm90_gemm2!(
    buffer("out", B::Output, "output bf16 [tokens, H], zeroed beforehand; rows are reduce-added"),
    GEMM2_BIAS
);

/// Hopper GEMM2 writing per-route rows for the deterministic finalize.
pub const SM90_GEMM2_DETERMINISTIC: &[Param] = sm90_gemm2!(buffer(
    "out",
    B::FinalizeScratch,
    "scratch bf16 [tokens·top_k, H]; local routes' rows are written"
));

/// [`SM90_GEMM2_DETERMINISTIC`] with GEMM2's bias.
pub const SM90_GEMM2_DETERMINISTIC_BIAS: &[Param] = sm90_gemm2!(
    buffer(
        "out",
        B::FinalizeScratch,
        "scratch bf16 [tokens·top_k, H]; local routes' rows are written"
    ),
    GEMM2_BIAS
);

/// NVFP4 quantization and exact dequantization of bf16 activations (Hopper A4): each value
/// becomes e2m1 · scale in bf16 (the global scale goes into α1).
pub const QDQ_NVFP4: &[Param] = &[
    buffer("x", B::ActivationsBf16, "activations bf16 [tokens, H]"),
    buffer("out", B::ActivationsDequantized, "bf16 [tokens, H]: e2m1 · ue4m3 scale, exact"),
    buffer(
        "global_scale",
        B::ActivationGlobalScale,
        "f32 [1] (device): the activations' global scale",
    ),
    scalar("tokens", S::Tokens, "rows"),
    scalar("hidden", S::Hidden, "H, a multiple of 16"),
];

/// bf16 activations → E4M3 per token (Hopper A8): row n's scale is the least power of two
/// 2^e with max|x\[n\]| ≤ 448 · 2^e; values are x · 2^−e rounded to nearest E4M3; the scale
/// goes to the permuted row of each of the token's local routes.
pub const QUANT_FP8_TOKENS: &[Param] = &[
    buffer("x", B::ActivationsBf16, "activations bf16 [tokens, H]"),
    buffer("out", B::ActivationsFp8, "e4m3 [tokens, Hp]; the tail past H is zero"),
    buffer(
        "expanded_idx_to_permuted_idx",
        B::ExpandedIdxToPermutedIdx,
        "i32 [tokens·top_k]: each route's permuted row, −1 if not local",
    ),
    buffer("scales", B::ActivationRowScales, "f32 [max permuted rows]: 2^e per local route's row"),
    scalar("tokens", S::Tokens, "rows"),
    scalar("hidden", S::Hidden, "H, a multiple of 64"),
    scalar("top_k", S::TopK, "routes per token"),
];

/// GEMM1's bf16 output → E4M3 per permuted row (Hopper A8), as [`QUANT_FP8_TOKENS`] does per
/// token, for the rows of the live tiles.
pub const QUANT_FP8_ROWS: &[Param] = &[
    buffer("x", B::Gemm1OutputBf16, "h bf16 [max permuted rows, I]"),
    buffer("out", B::Gemm1OutputFp8, "e4m3 [max permuted rows, Ip]; the tail past I is zero"),
    buffer("total_num_padded_tokens", B::TotalNumPaddedTokens, "i32 [1]: rows of the live tiles"),
    buffer("scales", B::Gemm1OutputRowScales, "f32 [max permuted rows]: 2^e per row"),
    scalar("max_rows", S::MaxPermutedRows, "rows the grid covers"),
    scalar("intermediate", S::Intermediate, "I, a multiple of 64"),
];

mod sm100_mx;
pub use sm100_mx::*;
