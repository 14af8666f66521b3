//! The layer an engine calls: built once (weights uploaded once, kernels resolved once),
//! then `forward` on the caller's stream with the caller's device buffers. The run path
//! allocates nothing, never waits for the device and reads nothing back, so it can be
//! captured into a CUDA graph; every input is validated on the host before the first launch.

use std::collections::BTreeSet;
use std::sync::Mutex;

use moegen_dsl::abi::launch::ROUTES_PER_BLOCK;
use moegen_dsl::abi::{Buffer, GemmKey, KernelId, KernelInfo, MapDims, Scalar, SimtFamily};
use moegen_dsl::plan::MoeShape;
use moegen_dsl::{
    FinalizeMode, GemmKind, GemmTactic, KernelDescBuilder, MoeTactic, SwigluInput, Target,
    nvfp4_tactics,
};

use super::dispatch::{DispatchTable, applicable};
use super::error::LayerError;
use super::kernel_set::KernelSet;
use super::memory::{DeviceSlice, LayerWeights, Workspace};
use crate::backend::{Backend, GraphId};
use crate::launch::{Bindings, GridInputs, kernel_args, launch_shape};

/// The options of a layer's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerConfig {
    /// Shape and expert window.
    pub shape: MoeShape,
    /// SwiGLU input precision (the kernel set must hold matching GEMM1 kernels).
    pub swiglu_input: SwigluInput,
    /// How routes are summed into the output.
    pub finalize: FinalizeMode,
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
    gemm2: &'static KernelInfo,
}

/// One MoE layer.
#[derive(Debug)]
pub struct MoeLayer {
    config: LayerConfig,
    weights: LayerWeights,
    dispatch: DispatchTable,
    resolved: Vec<Resolved>,
    simt: [&'static KernelInfo; 5],
    print_tactic: bool,
    printed: Mutex<BTreeSet<u64>>,
}

fn gemm_key(g: &GemmTactic, c: &LayerConfig, target: Target) -> Result<GemmKey, LayerError> {
    let mut d = KernelDescBuilder::new(*g).target(target);
    d = match g.kind() {
        GemmKind::Gemm1 => d.swiglu_input(c.swiglu_input),
        GemmKind::Gemm2 => d.finalize(c.finalize),
    };
    d.build().map(|d| d.key()).map_err(|e| LayerError::MissingKernel(e.to_string()))
}

/// The set's GEMM kernel for `g` under `c`, for any SM100 target it holds.
fn gemm_kernel(
    kernels: &KernelSet,
    g: &GemmTactic,
    c: &LayerConfig,
) -> Result<&'static KernelInfo, LayerError> {
    let mut tried = Vec::new();
    for target in Target::ALL {
        let id = KernelId::Gemm(gemm_key(g, c, target)?);
        if let Some(k) = kernels.find(&id) {
            return Ok(k);
        }
        tried.push(id.name());
    }
    Err(LayerError::MissingKernel(tried.join(" or ")))
}

impl MoeLayer {
    /// The tactics `kernels` can run for a layer of `config` with up to `max_tokens` tokens.
    pub fn candidates(
        config: &LayerConfig,
        kernels: &KernelSet,
        max_tokens: u64,
    ) -> Vec<MoeTactic> {
        applicable(&config.shape, max_tokens, &nvfp4_tactics())
            .into_iter()
            .filter(|t| {
                gemm_kernel(kernels, t.gemm1(), config).is_ok()
                    && gemm_kernel(kernels, t.gemm2(), config).is_ok()
            })
            .collect()
    }

    /// Builds a layer: resolves the kernels of every tactic the kernel set can run for it
    /// (the dispatch table must choose among those) and the SIMT kernels for `b`'s flavour,
    /// so the run path looks nothing up.
    pub fn new(
        b: &dyn Backend,
        config: LayerConfig,
        weights: LayerWeights,
        kernels: &KernelSet,
        dispatch: DispatchTable,
    ) -> Result<Self, LayerError> {
        if weights.shape != config.shape {
            return Err(LayerError::WorkspaceMismatch {
                reason: "the weights were prepared for another shape".into(),
            });
        }
        let mut resolved = Vec::new();
        for t in applicable(&config.shape, dispatch.buckets().max_tokens(), &nvfp4_tactics()) {
            if let (Ok(gemm1), Ok(gemm2)) =
                (gemm_kernel(kernels, t.gemm1(), &config), gemm_kernel(kernels, t.gemm2(), &config))
            {
                resolved.push(Resolved { tactic: t, gemm1, gemm2 });
            }
        }
        for t in dispatch.choices() {
            if !resolved.iter().any(|r| r.tactic == *t) {
                // Name the missing kernels when that is the reason.
                gemm_kernel(kernels, t.gemm1(), &config)?;
                gemm_kernel(kernels, t.gemm2(), &config)?;
                return Err(LayerError::NoTactic(format!("{t} does not apply to this layer")));
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
            simt_kernel(SimtFamily::QuantizeNvfp4)?,
            simt_kernel(SimtFamily::FinalizeReduce)?,
        ];
        Ok(Self {
            config,
            weights,
            dispatch,
            resolved,
            simt,
            print_tactic: std::env::var_os("MOEGEN_PRINT_TACTIC").is_some_and(|v| v != "0"),
            printed: Mutex::new(BTreeSet::new()),
        })
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
        io.output.check("output", t * h * 2, 16)
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
        let r = self.resolved.iter().find(|r| r.tactic == *tactic).ok_or_else(|| {
            LayerError::NoTactic(format!("{tactic} is not resolved by this layer"))
        })?;
        self.check_workspace(ws, tactic)?;
        self.check_io(ws, io)?;
        let s = &self.config.shape;
        let w = &s.window;
        let routes = (io.tokens * w.top_k()) as u64;
        let plan = ws.plan();
        let (tiles, rows) = (plan.tile_capacity(), plan.row_capacity());
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
            .scalar(Scalar::TopK, w.top_k() as u64)?
            .scalar(Scalar::Hidden, s.hidden as u64)?
            .scalar(Scalar::Intermediate, s.intermediate as u64)?
            .scalar(Scalar::TileSize, u64::from(tactic.tile().rows()))?
            .scalar(Scalar::MaxTiles, tiles)?
            .scalar(Scalar::MaxPermutedRows, rows)?
            .scalar(Scalar::SortBlocks, routes.div_ceil(u64::from(ROUTES_PER_BLOCK)))?;
        let grid = GridInputs {
            routes,
            tokens: io.tokens as u64,
            hidden: s.hidden as u64,
            intermediate: s.intermediate as u64,
            max_tiles: tiles,
            local_experts: w.local() as u64,
            sm_count: b.sm_count(),
        };
        let run = |b: &mut dyn Backend, k: &'static KernelInfo| -> Result<(), LayerError> {
            let args = kernel_args(b, k, &bind)?;
            let shape = launch_shape(k, &grid)?;
            b.launch(k, shape, &args)?;
            Ok(())
        };
        let [hist, offsets, scatter, quantize, finalize] = self.simt;
        ws.reset_errors(b)?;
        run(b, hist)?;
        run(b, offsets)?;
        run(b, scatter)?;
        run(b, quantize)?;
        if self.config.finalize == FinalizeMode::BulkReduceAdd {
            b.memset(io.output.ptr, 0, io.tokens * s.hidden * 2)?;
        }
        run(b, r.gemm1)?;
        run(b, r.gemm2)?;
        if self.config.finalize == FinalizeMode::Deterministic {
            run(b, finalize)?;
        }
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
        b.begin_capture()?;
        let r = self.forward(b, ws, io);
        // End the capture whatever happened, so the stream is usable again.
        let g = b.end_capture();
        r?;
        Ok(g?)
    }

    /// Reads the workspace's error record (waits for the stream): expert ids outside
    /// `[0, experts)` are reported with their token and slot.
    pub fn check_errors(&self, b: &mut dyn Backend, ws: &Workspace) -> Result<(), LayerError> {
        ws.check_errors(b, &self.config.shape.window)
    }
}
