//! Kernel parameters as meaning, not just type: each parameter names the scalar, buffer or
//! tensor map it carries, so the runtime binds arguments from the same description codegen
//! declared them from.

/// PTX type of a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ParamType {
    /// `.u32`.
    U32,
    /// `.u64` (a device pointer).
    U64,
    /// A 128-byte CUtensorMap passed by value (`.align 64 .b8 name[128]`).
    TensorMap,
}

impl ParamType {
    /// Bytes the argument occupies.
    pub const fn size(self) -> usize {
        match self {
            ParamType::U32 => 4,
            ParamType::U64 => 8,
            ParamType::TensorMap => 128,
        }
    }
    /// Alignment of the argument.
    pub const fn align(self) -> usize {
        match self {
            ParamType::U32 => 4,
            ParamType::U64 => 8,
            ParamType::TensorMap => 64,
        }
    }
    /// The `.param` declaration of a parameter called `name`.
    pub fn decl(self, name: &str) -> String {
        match self {
            ParamType::U32 => format!(".u32 {name}"),
            ParamType::U64 => format!(".u64 {name}"),
            ParamType::TensorMap => format!(".align 64 .b8 {name}[128]"),
        }
    }
}

/// A 32-bit value derived from the problem (`.u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Scalar {
    /// Tokens in this launch.
    Tokens,
    /// Routes: tokens · top_k.
    NumRoutes,
    /// Experts in the model.
    NumExperts,
    /// First local expert.
    LocalOffset,
    /// Local experts L.
    LocalExperts,
    /// Routes per token.
    TopK,
    /// Hidden size H.
    Hidden,
    /// Intermediate size I.
    Intermediate,
    /// Routing tile rows T.
    TileSize,
    /// Length of the tile arrays (the workspace's, at least `max_tiles` of this launch).
    MaxTiles,
    /// Length of the permuted row arrays (`max_tiles · T` or more).
    MaxPermutedRows,
    /// Histogram blocks of the routing sort: ceil(routes / ROUTES_PER_BLOCK).
    SortBlocks,
    /// Expert-parallel all-to-all mode: routes per peer block `C` (`AllToAllPlan::per_peer`).
    PerPeer,
    /// Routing sort: 1 skips `abi::ep::NO_ROUTE` silently (`abi::ep::Padding::Skip`), 0
    /// refuses it as out of range.
    AcceptPadding,
    /// A GEMM's live-tile mask, bits 0–31: bit `L` set, the kernel does its units when the
    /// routing sort left `L` live tiles; clear, it does none (its sibling of another width
    /// does them: `MoeTactic::gemm1_wide`). All ones: always.
    LiveTileMaskLo,
    /// Bits 32–63 of the live-tile mask ([`Scalar::LiveTileMaskLo`]); its bit 31 stands for
    /// 63 live tiles or more.
    LiveTileMaskHi,
}

/// A device buffer; the workspace plan and the layer's tensors are named by these.
/// Serialized as its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buffer {
    /// i32 [tokens·top_k] global expert ids (router output).
    RoutedExperts,
    /// f32 [tokens, top_k] router weights.
    RouterWeights,
    /// i32 [sort blocks · L] scratch of the routing sort: counts, then bases.
    SortBlockCounts,
    /// u32 \[7\] the error record of the device-side checks (`abi::error_record`).
    ErrorFlags,
    /// i32 \[max_tiles\] local expert of each routing tile.
    TileIdxToExpertIdx,
    /// i32 \[max_tiles\] exclusive end of each tile's valid rows.
    TileIdxToMnLimit,
    /// i32 [tokens·top_k] permuted row of each route, −1 if not local.
    ExpandedIdxToPermutedIdx,
    /// i32 [max permuted rows] route of each valid row.
    PermutedIdxToExpandedIdx,
    /// i32 \[1\] live routing tiles.
    NumNonExitingTiles,
    /// i32 \[1\] live tiles · T.
    TotalNumPaddedTokens,
    /// bf16 [tokens, H] activations before quantization.
    ActivationsBf16,
    /// f32 \[1\] global scale the activations are quantized with.
    ActivationGlobalScale,
    /// e2m1x2 [tokens, H/2] NVFP4 activations.
    Activations,
    /// ue4m3 [tokens, H/16] activation scales, linear.
    ActivationScales,
    /// bf16 [tokens, H] NVFP4 activations dequantized exactly (e2m1 · scale; Hopper A4).
    ActivationsDequantized,
    /// e2m1x2 [L, 2I, H/2] W1 (up/gate interleaved in blocks of 64).
    W1,
    /// W1's scales: L × 128x4 blocks of [2I, H/16].
    W1Scales,
    /// f32 \[L\] α1.
    Alpha1,
    /// f32 \[1\] `fc2_input_scale`: GEMM1 requantizes its output with it.
    Fc2InputScale,
    /// e2m1x2 [max permuted rows, I/2] GEMM1's output h.
    Gemm1Output,
    /// h's scales: 128x4 layout of [max permuted rows, I/16].
    Gemm1OutputScales,
    /// bf16 [max permuted rows, I] GEMM1's output on Hopper (A4: the requantized values,
    /// dequantized exactly).
    Gemm1OutputBf16,
    /// e2m1x2 [L, H, I/2] W2.
    W2,
    /// W2's scales: L × 128x4 blocks of [H, I/16].
    W2Scales,
    /// f32 \[L\] α2.
    Alpha2,
    /// bf16 [tokens, H] the layer's output.
    Output,
    /// bf16 [tokens·top_k, H] per-route rows of the deterministic finalize.
    FinalizeScratch,
    /// e4m3 [tokens, Hp] activations quantized per token (Hopper A8; Hp = H rounded up to
    /// 128, the tail zero).
    ActivationsFp8,
    /// f32 [max permuted rows] the power-of-two scale of each valid permuted row's
    /// quantized token (A8).
    ActivationRowScales,
    /// e4m3 [max permuted rows, Ip] GEMM1's output quantized per row (A8; Ip = I rounded up
    /// to 128, the tail zero).
    Gemm1OutputFp8,
    /// f32 [max permuted rows] the power-of-two scale of each row of `Gemm1OutputFp8`.
    Gemm1OutputRowScales,
    /// f32 [L, 2I] the power-of-two factor of each W1 row (A8 weights; fragment row order).
    W1RowScales,
    /// f32 [L, H] the power-of-two factor of each W2 row (A8 weights).
    W2RowScales,
    /// f32 [L, 4] the activation's per-expert parameters (α, β, limit, 0) (GEMM1 of
    /// `Activation::SwigluClamped`).
    ActivationParams,
    /// f32 [L, 2I] GEMM1's per-expert bias: the up rows' I values, then the gate rows'.
    Gemm1Bias,
    /// f32 [L, H] GEMM2's per-expert bias.
    Gemm2Bias,
    /// i32 [G·C] expert-parallel send blocks: each slot's global expert id, `NO_ROUTE` on
    /// padding (`abi::ep`).
    EpSendExperts,
    /// f32 [G·C] each send slot's router weight, 0 on padding.
    EpSendWeights,
    /// i32 [G·C] each send slot's expanded index `t·k + s` on the home rank, −1 on padding.
    EpSentRoutes,
    /// u32 \[G\] routes packed for each peer.
    EpPeerCounts,
    /// bf16 [G·C, H] each send slot's activation row, zeros on padding.
    EpSendRows,
    /// bf16 [G·C, H] the rows the owners sent back, in the send slots' order.
    EpCombineRecv,
}

impl Scalar {
    /// Every scalar.
    pub const ALL: [Scalar; 16] = [
        Scalar::Tokens,
        Scalar::NumRoutes,
        Scalar::NumExperts,
        Scalar::LocalOffset,
        Scalar::LocalExperts,
        Scalar::TopK,
        Scalar::Hidden,
        Scalar::Intermediate,
        Scalar::TileSize,
        Scalar::MaxTiles,
        Scalar::MaxPermutedRows,
        Scalar::SortBlocks,
        Scalar::PerPeer,
        Scalar::AcceptPadding,
        Scalar::LiveTileMaskLo,
        Scalar::LiveTileMaskHi,
    ];
}

impl Buffer {
    /// Every buffer.
    pub const ALL: [Buffer; 42] = [
        Buffer::RoutedExperts,
        Buffer::RouterWeights,
        Buffer::SortBlockCounts,
        Buffer::ErrorFlags,
        Buffer::TileIdxToExpertIdx,
        Buffer::TileIdxToMnLimit,
        Buffer::ExpandedIdxToPermutedIdx,
        Buffer::PermutedIdxToExpandedIdx,
        Buffer::NumNonExitingTiles,
        Buffer::TotalNumPaddedTokens,
        Buffer::ActivationsBf16,
        Buffer::ActivationGlobalScale,
        Buffer::Activations,
        Buffer::ActivationScales,
        Buffer::ActivationsDequantized,
        Buffer::W1,
        Buffer::W1Scales,
        Buffer::Alpha1,
        Buffer::Fc2InputScale,
        Buffer::Gemm1Output,
        Buffer::Gemm1OutputScales,
        Buffer::Gemm1OutputBf16,
        Buffer::W2,
        Buffer::W2Scales,
        Buffer::Alpha2,
        Buffer::Output,
        Buffer::FinalizeScratch,
        Buffer::ActivationsFp8,
        Buffer::ActivationRowScales,
        Buffer::Gemm1OutputFp8,
        Buffer::Gemm1OutputRowScales,
        Buffer::W1RowScales,
        Buffer::W2RowScales,
        Buffer::ActivationParams,
        Buffer::Gemm1Bias,
        Buffer::Gemm2Bias,
        Buffer::EpSendExperts,
        Buffer::EpSendWeights,
        Buffer::EpSentRoutes,
        Buffer::EpPeerCounts,
        Buffer::EpSendRows,
        Buffer::EpCombineRecv,
    ];

    /// The name the workspace plan and the manifest use.
    pub const fn name(self) -> &'static str {
        match self {
            Buffer::RoutedExperts => "routed_experts",
            Buffer::RouterWeights => "router_weights",
            Buffer::SortBlockCounts => "sort_block_counts",
            Buffer::ErrorFlags => "error_flags",
            Buffer::TileIdxToExpertIdx => "tile_idx_to_expert_idx",
            Buffer::TileIdxToMnLimit => "tile_idx_to_mn_limit",
            Buffer::ExpandedIdxToPermutedIdx => "expanded_idx_to_permuted_idx",
            Buffer::PermutedIdxToExpandedIdx => "permuted_idx_to_expanded_idx",
            Buffer::NumNonExitingTiles => "num_non_exiting_tiles",
            Buffer::TotalNumPaddedTokens => "total_num_padded_tokens",
            Buffer::ActivationsBf16 => "activations_bf16",
            Buffer::ActivationGlobalScale => "activation_global_scale",
            Buffer::Activations => "activations",
            Buffer::ActivationScales => "activation_scales",
            Buffer::ActivationsDequantized => "activations_dequantized",
            Buffer::W1 => "w1",
            Buffer::W1Scales => "w1_scales",
            Buffer::Alpha1 => "alpha1",
            Buffer::Fc2InputScale => "fc2_input_scale",
            Buffer::Gemm1Output => "gemm1_output",
            Buffer::Gemm1OutputScales => "gemm1_output_scales",
            Buffer::Gemm1OutputBf16 => "gemm1_output_bf16",
            Buffer::W2 => "w2",
            Buffer::W2Scales => "w2_scales",
            Buffer::Alpha2 => "alpha2",
            Buffer::Output => "output",
            Buffer::FinalizeScratch => "finalize_scratch",
            Buffer::ActivationsFp8 => "activations_fp8",
            Buffer::ActivationRowScales => "activation_row_scales",
            Buffer::Gemm1OutputFp8 => "gemm1_output_fp8",
            Buffer::Gemm1OutputRowScales => "gemm1_output_row_scales",
            Buffer::W1RowScales => "w1_row_scales",
            Buffer::W2RowScales => "w2_row_scales",
            Buffer::ActivationParams => "activation_params",
            Buffer::Gemm1Bias => "gemm1_bias",
            Buffer::Gemm2Bias => "gemm2_bias",
            Buffer::EpSendExperts => "ep_send_experts",
            Buffer::EpSendWeights => "ep_send_weights",
            Buffer::EpSentRoutes => "ep_sent_routes",
            Buffer::EpPeerCounts => "ep_peer_counts",
            Buffer::EpSendRows => "ep_send_rows",
            Buffer::EpCombineRecv => "ep_combine_recv",
        }
    }
}

impl serde::Serialize for Buffer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A tensor map a kernel reads or writes through TMA; its layout is a function of the
/// problem and the kernel ([`super::tensor_map::layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum TensorMap {
    /// W1 as GEMM1's B operand.
    W1,
    /// W1's scales as GEMM1's SFB.
    W1Scales,
    /// GEMM1's output h as the target of its epilogue's tile stores.
    Gemm1OutputStore,
    /// h as GEMM2's A operand.
    Gemm1OutputLoad,
    /// h's scales as GEMM2's SFA.
    Gemm1OutputScales,
    /// W2 as GEMM2's B operand.
    W2,
    /// W2's scales as GEMM2's SFB.
    W2Scales,
    /// Hopper: GEMM1's bf16 output as GEMM2's activation operand (T rows × 64 K, 128B swizzle).
    Gemm1HiddenLoad,
    /// Hopper A8: GEMM1's output quantized to E4M3 as GEMM2's activation operand (T rows ×
    /// 128 K, 128B swizzle).
    Gemm1HiddenFp8Load,
}

/// What a parameter carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ParamKind {
    /// A `.u32` problem value.
    Scalar(Scalar),
    /// A `.u64` device pointer to a buffer.
    Buffer(Buffer),
    /// A by-value tensor map.
    TensorMap(TensorMap),
    /// A validation kernel's argument, bound by position by the validation harness.
    Validation(ParamType),
}

impl ParamKind {
    /// The PTX type.
    pub const fn ty(self) -> ParamType {
        match self {
            ParamKind::Scalar(_) => ParamType::U32,
            ParamKind::Buffer(_) => ParamType::U64,
            ParamKind::TensorMap(_) => ParamType::TensorMap,
            ParamKind::Validation(t) => t,
        }
    }
}

/// One kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Param {
    /// PTX name.
    pub name: &'static str,
    /// What it carries.
    pub kind: ParamKind,
    /// Meaning, units and layout (for the manifest and humans).
    pub meaning: &'static str,
}

impl Param {
    /// The PTX type.
    pub const fn ty(&self) -> ParamType {
        self.kind.ty()
    }
    /// The `.param` declaration text.
    pub fn decl(&self) -> String {
        self.ty().decl(self.name)
    }
}
