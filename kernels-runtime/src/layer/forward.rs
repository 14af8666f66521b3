//! The layer an engine calls: built once (weights uploaded once, kernels resolved once),
//! then `forward` on the caller's stream with the caller's device buffers. The run path
//! allocates nothing, never waits for the device and reads nothing back, so it can be
//! captured into a CUDA graph; every input is validated on the host before the first launch.

use std::collections::BTreeSet;
use std::sync::Mutex;

use moegen_dsl::abi::ep::Padding;
use moegen_dsl::abi::launch::persistent_units;
use moegen_dsl::abi::launch::{QUANT_FP8_THREADS, ROUTES_PER_BLOCK};
use moegen_dsl::abi::{Buffer, KernelId, KernelInfo, MapDims, Scalar, SimtFamily};
use moegen_dsl::abi::{SimtTarget, WeightFormat};
use moegen_dsl::plan::{MoeShape, max_permuted_rows, max_tiles};
use moegen_dsl::{
    ActivationFormat, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, MoeTactic, SwigluInput,
    Target,
};

use super::candidates::{CandidateReport, find_kernel};
use super::dispatch::DispatchTable;
use super::error::LayerError;
use super::kernel_set::KernelSet;
use super::live_tiles::{UnitSpread, wide_gemm1_mask};
use super::memory::{DeviceSlice, LayerWeights, Workspace};
use super::refused::Refused;
use crate::backend::{Backend, DevicePtr, GraphId};
use crate::error::RuntimeError;
use crate::launch::{
    Bindings, GridInputs, LaunchError, dynamic_smem, kernel_args, launch_shape_on,
};

/// The options of a layer's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerConfig {
    /// Shape and expert window.
    pub shape: MoeShape,
    /// SwiGLU input precision (the kernel set must hold matching GEMM1 kernels).
    pub swiglu_input: SwigluInput,
    /// How routes are summed into the output.
    pub finalize: FinalizeMode,
    /// What the activations entering GEMM1 are, quantized on the device from the caller's
    /// bf16: NVFP4 (both generations), MXFP8 (SM100 with MXFP4 weights), bf16 (Hopper's A16)
    /// or FP8 per row (Hopper's A8).
    pub activations: ActivationFormat,
    /// GEMM1's activation and which GEMMs add a per-expert bias (default plain SwiGLU, no
    /// biases). The weights must carry the matching data (`Sm90Weights::with_epilogue`,
    /// `PreparedWeights::with_epilogue`) and the kernel set the matching GEMMs.
    pub epilogue: EpilogueSpec,
    /// GEMM1's epilogue recipe; `None`: the target's default (`Fast` on SM100, `Exact` on
    /// sm_90a). `Exact` uses IEEE operations only, so CPU, simulator and GPU agree bit for
    /// bit; `Fast` uses MUFU `ex2`/`rcp`, within a derived tolerance on hardware
    /// (docs/reference.md). Hopper's Fast GEMM1s (bf16 and FP8 activations) are not in the
    /// built-in set: a set that serves a Fast layer generates them (`Sm90Gemms::recipes`).
    pub recipe: Option<EpilogueRecipe>,
}

impl LayerConfig {
    /// NVFP4 activations, f32 SwiGLU inputs, bulk reduce-add finalize.
    pub fn new(shape: MoeShape) -> Self {
        Self {
            shape,
            swiglu_input: SwigluInput::F32,
            finalize: FinalizeMode::BulkReduceAdd,
            activations: ActivationFormat::Nvfp4,
            epilogue: EpilogueSpec::PLAIN,
            recipe: None,
        }
    }

    /// The epilogue recipe this configuration runs on `target`: the configured one, else the
    /// target's default. What a CPU reference of the layer must use.
    pub fn recipe_on(&self, target: Target) -> EpilogueRecipe {
        self.recipe.unwrap_or(target.default_recipe())
    }
}

/// One forward pass's buffers, all the caller's: bf16 activations `[tokens, H]`, top-k
/// expert ids (i32, global) and weights (f32) `[tokens, k]`, bf16 output `[tokens, H]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardIo {
    /// Tokens of this pass.
    pub tokens: usize,
    /// bf16 `[tokens, H]`.
    pub activations: DeviceSlice,
    /// i32 `[tokens, top_k]` global expert ids.
    pub expert_ids: DeviceSlice,
    /// f32 `[tokens, top_k]` router weights.
    pub expert_weights: DeviceSlice,
    /// bf16 `[tokens, H]`, overwritten.
    pub output: DeviceSlice,
}

/// A tactic with its two GEMM kernels.
#[derive(Clone, Copy, Debug)]
struct Resolved {
    tactic: MoeTactic,
    gemm1: &'static KernelInfo,
    /// The wider GEMM1 launched beside `gemm1` (`MoeTactic::gemm1_wide`).
    gemm1_wide: Option<&'static KernelInfo>,
    gemm2: &'static KernelInfo,
}

/// What a layer looks up once, when it is built.
struct Lookups {
    resolved: Vec<Resolved>,
    simt: [&'static KernelInfo; 5],
    activation_kernel: Option<&'static KernelInfo>,
    hidden_kernel: Option<&'static KernelInfo>,
}

/// One MoE layer.
#[derive(Debug)]
pub struct MoeLayer {
    config: LayerConfig,
    weights: LayerWeights,
    dispatch: DispatchTable,
    resolved: Vec<Resolved>,
    simt: [&'static KernelInfo; 5],
    /// The activation step: NVFP4 quantization (SM100), quantize-dequantize (Hopper A4),
    /// E4M3 per token (Hopper A8), or none (Hopper A16).
    activation_kernel: Option<&'static KernelInfo>,
    /// Between the GEMMs: h to E4M3 per row (Hopper A8).
    hidden_kernel: Option<&'static KernelInfo>,
    print_tactic: bool,
    printed: Mutex<BTreeSet<u64>>,
}

/// The generation of kernels `b` runs.
pub fn arch_of(b: &dyn Backend) -> Arch {
    match b.simt_target() {
        SimtTarget::Sm100f => Arch::Sm100,
        SimtTarget::Sm90a => Arch::Sm90,
    }
}

impl MoeLayer {
    /// The tactics `kernels` can run on a device of generation `arch` for a layer of
    /// `config` whose weights are in `format`, with up to `max_tokens` tokens; when there
    /// are none, [`LayerError::NoCandidates`] says why each tactic of the generation's space
    /// was rejected ([`Self::explain_candidates`] gives the reasons in any case).
    pub fn candidates(
        config: &LayerConfig,
        kernels: &KernelSet,
        max_tokens: u64,
        arch: Arch,
        format: WeightFormat,
    ) -> Result<Vec<MoeTactic>, LayerError> {
        Ok(Self::explain_candidates(config, kernels, max_tokens, arch, format).into_result()?)
    }

    /// Every tactic of `arch`'s space, sorted into those `kernels` can run for this layer
    /// and those it cannot, each with its reason.
    pub fn explain_candidates(
        config: &LayerConfig,
        kernels: &KernelSet,
        max_tokens: u64,
        arch: Arch,
        format: WeightFormat,
    ) -> CandidateReport {
        CandidateReport::new(config, kernels, max_tokens, arch, format)
    }

    /// Builds a layer: resolves the kernels of every tactic the kernel set can run for it
    /// (the dispatch table must choose among those) and the SIMT kernels for `b`'s flavour,
    /// so the run path looks nothing up. On an error the weights are dropped unreleased (the
    /// backend frees what it allocated when it is dropped); [`Self::try_new`] gives them back.
    pub fn new(
        b: &dyn Backend,
        config: LayerConfig,
        weights: LayerWeights,
        kernels: &KernelSet,
        dispatch: DispatchTable,
    ) -> Result<Self, LayerError> {
        Self::try_new(b, config, weights, kernels, dispatch).map_err(|r| r.error)
    }

    /// [`Self::new`], giving the weights back with the error when the layer is refused, so
    /// the caller can release them (`LayerWeights::release`) or build another layer on them.
    pub fn try_new(
        b: &dyn Backend,
        config: LayerConfig,
        weights: LayerWeights,
        kernels: &KernelSet,
        dispatch: DispatchTable,
    ) -> Result<Self, Box<Refused>> {
        match Self::resolve(b, &config, &weights, kernels, &dispatch) {
            Ok(r) => Ok(Self {
                config,
                weights,
                dispatch,
                resolved: r.resolved,
                simt: r.simt,
                activation_kernel: r.activation_kernel,
                hidden_kernel: r.hidden_kernel,
                print_tactic: std::env::var_os("MOEGEN_PRINT_TACTIC").is_some_and(|v| v != "0"),
                printed: Mutex::new(BTreeSet::new()),
            }),
            Err(error) => Err(Box::new(Refused { error, weights })),
        }
    }

    /// Everything [`Self::try_new`] checks and looks up.
    fn resolve(
        b: &dyn Backend,
        config: &LayerConfig,
        weights: &LayerWeights,
        kernels: &KernelSet,
        dispatch: &DispatchTable,
    ) -> Result<Lookups, LayerError> {
        if weights.shape != config.shape {
            return Err(LayerError::WorkspaceMismatch {
                reason: "the weights were prepared for another shape".into(),
            });
        }
        let arch = arch_of(b);
        if weights.arch != arch {
            return Err(LayerError::WorkspaceMismatch {
                reason: format!(
                    "the weights are laid out for {:?}, the device is {arch:?}",
                    weights.arch
                ),
            });
        }
        if weights.epilogue != config.epilogue {
            return Err(LayerError::WorkspaceMismatch {
                reason: format!(
                    "the weights carry epilogue data for {:?}, the layer is configured for {:?}",
                    weights.epilogue, config.epilogue
                ),
            });
        }
        // Hopper's α are computed per activation format; SM100's layouts differ by format
        // (MXFP4 weights for MXFP8 activations, NVFP4 for NVFP4).
        if weights.activations != config.activations {
            return Err(LayerError::WorkspaceMismatch {
                reason: format!(
                    "the weights are prepared for {:?} activations, the layer takes {:?}",
                    weights.activations, config.activations
                ),
            });
        }
        let format = weights.format;
        let max_tokens = dispatch.buckets().max_tokens();
        let report = CandidateReport::new(config, kernels, max_tokens, arch, format);
        let kernel = |g| find_kernel(kernels, g, config, format);
        let mut resolved = Vec::with_capacity(report.accepted.len());
        for t in &report.accepted {
            let (gemm1, gemm2) = match (kernel(t.gemm1()), kernel(t.gemm2())) {
                (Ok(g1), Ok(g2)) => (g1, g2),
                (Err(reason), _) | (_, Err(reason)) => {
                    return Err(LayerError::TacticRejected {
                        tactic: *t,
                        reason: Box::new(reason),
                    });
                }
            };
            let gemm1_wide = match t.gemm1_wide().map(kernel).transpose() {
                Ok(w) => w,
                Err(reason) => {
                    return Err(LayerError::TacticRejected {
                        tactic: *t,
                        reason: Box::new(reason),
                    });
                }
            };
            resolved.push(Resolved { tactic: *t, gemm1, gemm1_wide, gemm2 });
        }
        for t in dispatch.choices() {
            if !resolved.iter().any(|r| r.tactic == *t) {
                return Err(match report.rejected.iter().find(|r| r.tactic == *t) {
                    Some(r) => LayerError::TacticRejected {
                        tactic: *t,
                        reason: Box::new(r.reason.clone()),
                    },
                    None => LayerError::NoTactic(format!("{t} is not a tactic of {arch:?}")),
                });
            }
        }
        let simt_kernel = |family| {
            let id = KernelId::Simt { family, target: b.simt_target() };
            kernels.find(&id).ok_or_else(|| LayerError::MissingKernel(id.name()))
        };
        let simt = [
            simt_kernel(SimtFamily::MoeSortHistogram)?,
            simt_kernel(SimtFamily::MoeSortOffsets)?,
            simt_kernel(SimtFamily::MoeSortScatter)?,
            simt_kernel(SimtFamily::MoeSortSingle)?,
            simt_kernel(SimtFamily::FinalizeReduce)?,
        ];
        let activation_kernel = match (arch, config.activations) {
            (Arch::Sm100, ActivationFormat::Nvfp4) => Some(simt_kernel(SimtFamily::QuantizeNvfp4)?),
            (Arch::Sm90, ActivationFormat::Nvfp4) => Some(simt_kernel(SimtFamily::QdqNvfp4)?),
            (Arch::Sm90, ActivationFormat::Bf16) => None,
            (Arch::Sm90, ActivationFormat::Fp8) => {
                // quant_fp8_tokens hands a token's row scale to its routes' rows, one thread
                // of the token's block per slot.
                // The message's figure is the block's thread count.
                const _: () = assert!(QUANT_FP8_THREADS == 256);
                if config.shape.top_k() > QUANT_FP8_THREADS as usize {
                    return Err(RuntimeError::UnsupportedActivations {
                        what: "top_k",
                        reason: "FP8 activations (A8) serve at most 256 experts per token",
                    }
                    .into());
                }
                Some(simt_kernel(SimtFamily::QuantFp8Tokens)?)
            }
            (Arch::Sm100, ActivationFormat::Bf16) => {
                return Err(LayerError::NoTactic(
                    "bf16 activations need Hopper: the SM100 MMA takes NVFP4".into(),
                ));
            }
            (Arch::Sm100, ActivationFormat::Fp8) => {
                return Err(LayerError::NoTactic(
                    "FP8 activations (A8) need Hopper: the SM100 kernels take NVFP4 or MXFP8"
                        .into(),
                ));
            }
            (Arch::Sm90, ActivationFormat::Mxfp8) => {
                return Err(LayerError::NoTactic(
                    "MXFP8 activations need SM100: Hopper's FP8 path is A8 (a scale per row)"
                        .into(),
                ));
            }
            (Arch::Sm100, ActivationFormat::Mxfp8) => Some(simt_kernel(SimtFamily::QuantizeMxfp8)?),
        };
        let hidden_kernel = match config.activations {
            ActivationFormat::Fp8 => Some(simt_kernel(SimtFamily::QuantFp8Rows)?),
            _ => None,
        };
        Ok(Lookups { resolved, simt, activation_kernel, hidden_kernel })
    }

    /// Drops the layer and gives its weights' memory back ([`LayerWeights::release`]: what
    /// this crate uploaded is freed, an engine's buffers are left alone).
    pub fn release(self, b: &mut dyn Backend) -> Result<(), LayerError> {
        self.weights.release(b)
    }

    /// The format of the layer's weights.
    pub fn weight_format(&self) -> WeightFormat {
        self.weights.format
    }

    /// The layer's configuration.
    pub fn config(&self) -> &LayerConfig {
        &self.config
    }
    /// Its dispatch table.
    pub fn dispatch(&self) -> &DispatchTable {
        &self.dispatch
    }
    /// Replaces the dispatch table (e.g. with the autotuner's); its choices must be among
    /// [`Self::tactics`].
    pub fn set_dispatch(&mut self, dispatch: DispatchTable) -> Result<(), LayerError> {
        if let Some(t) = dispatch.choices().iter().find(|t| !self.tactics().contains(t)) {
            return Err(LayerError::NoTactic(format!("{t} is not resolved by this layer")));
        }
        self.dispatch = dispatch;
        Ok(())
    }
    /// Every tactic this layer can run (its kernel set's, applicable to its shape).
    pub fn tactics(&self) -> Vec<MoeTactic> {
        self.resolved.iter().map(|r| r.tactic).collect()
    }

    /// Checks that `ws` can serve this layer with `tactic`.
    fn check_workspace(&self, ws: &Workspace, tactic: &MoeTactic) -> Result<(), LayerError> {
        let s = &self.config.shape;
        let spec = ws.spec();
        let mismatch = |reason: String| Err(LayerError::WorkspaceMismatch { reason });
        if spec.top_k != s.top_k() {
            return mismatch(format!("top_k {} (workspace {})", s.top_k(), spec.top_k));
        }
        for (what, v, max) in [
            ("local experts", s.local_experts(), spec.max_local_experts),
            ("hidden size", s.hidden, spec.max_hidden),
            ("intermediate size", s.intermediate, spec.max_intermediate),
        ] {
            if v > max {
                return mismatch(format!("{what} {v} exceeds the workspace's {max}"));
            }
        }
        if !spec.tile_sizes.contains(&tactic.tile()) {
            return mismatch(format!("tile size {} is not served", tactic.tile()));
        }
        if spec.arch != tactic.arch() {
            return mismatch(format!(
                "planned for {:?}, the layer runs {:?}",
                spec.arch,
                tactic.arch()
            ));
        }
        if spec.activations != self.config.activations {
            return mismatch(format!(
                "planned for {:?} activations, the layer takes {:?}",
                spec.activations, self.config.activations
            ));
        }
        if self.config.finalize == FinalizeMode::Deterministic && !spec.deterministic {
            return mismatch("no deterministic finalize scratch".into());
        }
        Ok(())
    }

    fn check_io(&self, ws: &Workspace, io: &ForwardIo) -> Result<(), LayerError> {
        let s = &self.config.shape;
        if io.tokens == 0 {
            return Err(moegen_dsl::plan::PlanError::Zero { what: "tokens" }.into());
        }
        if io.tokens > ws.spec().max_tokens {
            return Err(LayerError::TooManyTokens { tokens: io.tokens, max: ws.spec().max_tokens });
        }
        let (t, h, k) = (io.tokens as u64, s.hidden as u64, s.top_k() as u64);
        io.activations.check("activations", t * h * 2, 16)?;
        io.expert_ids.check("expert ids", t * k * 4, 4)?;
        io.expert_weights.check("expert weights", t * k * 4, 4)?;
        io.output.check("output", t * h * 2, 16)?;
        // The bulk reduce zeroes the output before the sort, so before anything reads the
        // inputs: none may overlap it (the deterministic finalize writes the output last,
        // after every read).
        if self.config.finalize == FinalizeMode::BulkReduceAdd {
            let out = (io.output.ptr.0, t * h * 2);
            for (name, at, bytes) in [
                ("activations", io.activations.ptr.0, t * h * 2),
                ("expert ids", io.expert_ids.ptr.0, t * k * 4),
                ("expert weights", io.expert_weights.ptr.0, t * k * 4),
            ] {
                if out.0 < at.saturating_add(bytes) && at < out.0.saturating_add(out.1) {
                    return Err(LayerError::Aliased { first: "output", second: name });
                }
            }
        }
        Ok(())
    }

    /// Runs the layer with the tactic its dispatch table picks for `io.tokens`; returns it.
    pub fn forward(
        &self,
        b: &mut dyn Backend,
        ws: &Workspace,
        io: &ForwardIo,
    ) -> Result<MoeTactic, LayerError> {
        let (bucket, tactic) = self.dispatch.choose(io.tokens as u64)?;
        if self.print_tactic
            && let Ok(mut seen) = self.printed.lock()
            && seen.insert(bucket)
        {
            eprintln!("moegen: {} tokens (bucket {bucket}) -> {tactic}", io.tokens);
        }
        self.forward_with(b, ws, io, &tactic)?;
        Ok(tactic)
    }

    /// Runs the layer with `tactic` (one of the dispatch table's choices, or for tuning any
    /// tactic whose kernels the layer resolved).
    pub fn forward_with(
        &self,
        b: &mut dyn Backend,
        ws: &Workspace,
        io: &ForwardIo,
        tactic: &MoeTactic,
    ) -> Result<(), LayerError> {
        self.run_pass(b, ws, io, tactic, true, Padding::Refuse)
    }

    /// [`Self::forward_with`], or in deterministic mode with `finalize` false everything
    /// but the final sum: each local route's bf16 row is left in the workspace's finalize
    /// scratch (`[tokens·k, H]`, expanded order) for a caller that sums routes elsewhere
    /// (expert parallelism, `crate::ep`). `padding`: what the sort does with
    /// `abi::ep::NO_ROUTE`; only the all-to-all owner, whose blocks it padded itself, skips
    /// it: in a caller's ids it is a wrong id to report.
    pub(crate) fn run_pass(
        &self,
        b: &mut dyn Backend,
        ws: &Workspace,
        io: &ForwardIo,
        tactic: &MoeTactic,
        finalize: bool,
        padding: Padding,
    ) -> Result<(), LayerError> {
        let r = self.resolved.iter().find(|r| r.tactic == *tactic).ok_or_else(|| {
            LayerError::NoTactic(format!("{tactic} is not resolved by this layer"))
        })?;
        self.check_workspace(ws, tactic)?;
        self.check_io(ws, io)?;
        let s = &self.config.shape;
        let w = &s.window;
        let routes = (io.tokens * w.top_k()) as u64;
        let plan = ws.plan();
        // The bounds of this pass's own routes at this tile size: the sort fills the tile
        // arrays' tails and the padding rows up to max_tiles · T, and the GEMMs' persistent
        // schedules walk max_tiles, so bounds from the workspace's maximum would cost work
        // proportional to it at every token count (and the largest tile count of the served
        // sizes times this T may not even fit the row arrays). Never above the plan's.
        let tp = plan.tile(tactic.tile()).ok_or_else(|| LayerError::WorkspaceMismatch {
            reason: format!("the workspace does not serve tile size {}", tactic.tile().rows()),
        })?;
        let (l, t) = (w.local() as u64, u64::from(tactic.tile().rows()));
        let tiles = max_tiles(routes, l, t)?.min(tp.max_tiles);
        let rows = max_permuted_rows(routes, l, t)?.min(tp.max_permuted_rows);
        let mut bind = Bindings::new()
            .map_dims(MapDims {
                hidden: s.hidden as u64,
                intermediate: s.intermediate as u64,
                local_experts: w.local() as u64,
                permuted_rows: rows,
            })
            .buffer(Buffer::ActivationsBf16, io.activations.ptr)
            .buffer(Buffer::RoutedExperts, io.expert_ids.ptr)
            .buffer(Buffer::RouterWeights, io.expert_weights.ptr)
            .buffer(Buffer::Output, io.output.ptr);
        for (buf, slice) in &self.weights.buffers {
            bind = bind.buffer(*buf, slice.ptr);
        }
        for p in &plan.shared {
            if let Some(ptr) = ws.ptr(p.buffer) {
                bind = bind.buffer(p.buffer, ptr);
            }
        }
        let bind = bind
            .scalar(Scalar::Tokens, io.tokens as u64)?
            .scalar(Scalar::NumRoutes, routes)?
            .scalar(Scalar::NumExperts, w.num_experts() as u64)?
            .scalar(Scalar::LocalOffset, w.offset() as u64)?
            .scalar(Scalar::LocalExperts, w.local() as u64)?
            .scalar(Scalar::AcceptPadding, padding.scalar())?
            .scalar(Scalar::TopK, w.top_k() as u64)?
            .scalar(Scalar::Hidden, s.hidden as u64)?
            .scalar(Scalar::Intermediate, s.intermediate as u64)?
            .scalar(Scalar::TileSize, u64::from(tactic.tile().rows()))?
            .scalar(Scalar::MaxTiles, tiles)?
            .scalar(Scalar::MaxPermutedRows, rows)?
            .scalar(Scalar::SortBlocks, routes.div_ceil(u64::from(ROUTES_PER_BLOCK)))?
            .live_tile_mask(u64::MAX);
        let grid = GridInputs {
            routes,
            tokens: io.tokens as u64,
            hidden: s.hidden as u64,
            intermediate: s.intermediate as u64,
            max_tiles: tiles,
            local_experts: w.local() as u64,
            sm_count: b.sm_count(),
            permuted_rows: rows,
        };
        let run_masked =
            |b: &mut dyn Backend, k: &'static KernelInfo, mask: u64| -> Result<(), LayerError> {
                let args = if mask == u64::MAX {
                    kernel_args(b, k, &bind)?
                } else {
                    kernel_args(b, k, &bind.clone().live_tile_mask(mask))?
                };
                let shape = launch_shape_on(b, k, &grid)?;
                b.launch(k, shape, &args)?;
                Ok(())
            };
        let run = |b: &mut dyn Backend, k: &'static KernelInfo| run_masked(b, k, u64::MAX);
        // With a wide GEMM1 beside the narrow one, each takes the live-tile counts at which
        // its busiest SM streams fewer weight rows (`live_tiles`).
        let gemm1_masks = match r.gemm1_wide {
            None => None,
            Some(wide) => {
                let spread = |b: &mut dyn Backend,
                              k: &'static KernelInfo|
                 -> Result<UnitSpread, LayerError> {
                    let fail = |reason: &str| LaunchError::Grid {
                        kernel: k.name,
                        reason: format!("pairing GEMM1 widths: {reason}"),
                    };
                    let KernelId::Gemm(key) = k.id else {
                        return Err(fail("not a GEMM").into());
                    };
                    let per_tile = persistent_units(&key, 1, grid.hidden, grid.intermediate)
                        .ok_or_else(|| fail("the N tiles do not divide into its clusters"))?;
                    let ctas = u64::from(launch_shape_on(b, k, &grid)?.grid);
                    Ok(UnitSpread {
                        rows_per_unit: u64::from(key.mma_n),
                        units_per_tile: per_tile,
                        ctas,
                    })
                };
                let sms = u64::from(grid.sm_count);
                let mask = wide_gemm1_mask(spread(b, r.gemm1)?, spread(b, wide)?, sms, tiles);
                Some((wide, mask))
            }
        };
        let [hist, offsets, scatter, single, finalize_kernel] = self.simt;
        ws.reset_errors(b)?;
        // Zeroed before the sort, not between it and GEMM1: a memset between two kernels
        // would cut the programmatic edge that lets GEMM1 launch while the sort runs.
        if self.config.finalize == FinalizeMode::BulkReduceAdd {
            b.memset(io.output.ptr, 0, io.tokens * s.hidden * 2)?;
        }
        if routes <= u64::from(ROUTES_PER_BLOCK) {
            // One block holds every route: the sort's three passes in one launch.
            run(b, single)?;
        } else {
            run(b, hist)?;
            run(b, offsets)?;
            run(b, scatter)?;
        }
        if let Some(k) = self.activation_kernel {
            run(b, k)?;
        }
        match gemm1_masks {
            None => run(b, r.gemm1)?,
            Some((wide, mask)) => {
                run_masked(b, r.gemm1, !mask)?;
                run_masked(b, wide, mask)?;
            }
        }
        if let Some(k) = self.hidden_kernel {
            run(b, k)?;
        }
        run(b, r.gemm2)?;
        if self.config.finalize == FinalizeMode::Deterministic && finalize {
            run(b, finalize_kernel)?;
        }
        Ok(())
    }

    /// The deterministic finalize alone: `output[t] = bf16(Σ_slots routes[t·k + s])`, in
    /// f32 in slot order, over `tokens` tokens of `top_k` routes whose every route is
    /// counted (`all_local`: `tokens·top_k` non-negative i32, e.g. zeros). What
    /// [`Self::run_pass`]'s finalize computes when every route is local, on route rows
    /// gathered from elsewhere. `top_k` is the model's, which a mode (b) rank's top-1 layer
    /// does not have.
    pub(crate) fn finalize_routes(
        &self,
        b: &mut dyn Backend,
        routes: DevicePtr,
        all_local: DevicePtr,
        output: DevicePtr,
        tokens: usize,
        top_k: usize,
    ) -> Result<(), LayerError> {
        let s = &self.config.shape;
        let k = self.simt[4];
        let bind = Bindings::new()
            .buffer(Buffer::FinalizeScratch, routes)
            .buffer(Buffer::ExpandedIdxToPermutedIdx, all_local)
            .buffer(Buffer::Output, output)
            .scalar(Scalar::Tokens, tokens as u64)?
            .scalar(Scalar::Hidden, s.hidden as u64)?
            .scalar(Scalar::TopK, top_k as u64)?;
        let routes_n = (tokens * top_k) as u64;
        let grid = GridInputs {
            routes: routes_n,
            tokens: tokens as u64,
            hidden: s.hidden as u64,
            intermediate: s.intermediate as u64,
            max_tiles: 0,
            local_experts: s.local_experts() as u64,
            sm_count: b.sm_count(),
            permuted_rows: 0,
        };
        let args = kernel_args(b, k, &bind)?;
        let shape = launch_shape_on(b, k, &grid)?;
        b.launch(k, shape, &args)?;
        Ok(())
    }

    /// Captures one forward pass (the dispatch table's tactic for `io.tokens`) into a graph;
    /// replay it with `Backend::replay` for the same buffers and token count.
    pub fn capture(
        &self,
        b: &mut dyn Backend,
        ws: &Workspace,
        io: &ForwardIo,
    ) -> Result<GraphId, LayerError> {
        let (_, tactic) = self.dispatch.choose(io.tokens as u64)?;
        self.warm(b, &tactic)?;
        captured(b, &mut |b| self.forward(b, ws, io).map(|_| ()))
    }

    /// Asks `b` now, outside any capture, what the launches of `tactic`'s GEMMs ask it
    /// (`Backend::resident_clusters`: on the CUDA backend a module load and an occupancy query,
    /// answered once per kernel), so a captured pass makes no driver call but launches.
    pub(crate) fn warm(&self, b: &mut dyn Backend, tactic: &MoeTactic) -> Result<(), LayerError> {
        let r = self.resolved.iter().find(|r| r.tactic == *tactic).ok_or_else(|| {
            LayerError::NoTactic(format!("{tactic} is not resolved by this layer"))
        })?;
        let local = self.config.shape.local_experts();
        for k in [Some(r.gemm1), r.gemm1_wide, Some(r.gemm2)].into_iter().flatten() {
            b.resident_clusters(k, dynamic_smem(k, local)?)?;
        }
        Ok(())
    }

    /// Reads the workspace's error record (waits for the stream): expert ids outside
    /// `[0, experts)` are reported with their token and slot.
    pub fn check_errors(&self, b: &mut dyn Backend, ws: &Workspace) -> Result<(), LayerError> {
        ws.check_errors(b, &self.config.shape.window)
    }
}

/// Records what `pass` launches into a graph. The capture is ended whatever happened, so the
/// stream is usable again, and a graph recorded from a pass that failed part-way is dropped:
/// the pass's error is the one returned.
pub(crate) fn captured(
    b: &mut dyn Backend,
    pass: &mut dyn FnMut(&mut dyn Backend) -> Result<(), LayerError>,
) -> Result<GraphId, LayerError> {
    b.begin_capture()?;
    let r = pass(b);
    let g = b.end_capture();
    match (r, g) {
        (Ok(()), g) => Ok(g?),
        (Err(e), Ok(g)) => {
            // The pass's error is the one to report.
            let _ = b.drop_graph(g);
            Err(e)
        }
        (Err(e), Err(_)) => Err(e),
    }
}
