//! Expert parallelism on CUDA devices over NCCL (feature `nccl`): the ranks of one
//! `ExpertParallel` layer (either mode) built from moe-bench's synthetic MXFP4 experts, for
//! `ep-check`
//! (G-rank output against the single-GPU layer, graph replay against eager) and
//! `moe-bench --ep G` (time per layer step, against one GPU holding the same experts).
//!
//! One process drives every rank (`NcclCollective::from_devices`), or one process per rank
//! joins through [`env_rank`]'s `MOEGEN_EP_*` variables (`NcclCollective::from_rank`).

mod check;
mod collectives;
mod timing;

pub use check::{CheckCase, check_ranks};
pub use collectives::check_collectives;
pub use timing::{EpBenchRow, time_ranks};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use moegen_dsl::{FinalizeMode, MoeTactic, TileSize};
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::backend::{Backend, BackendError};
use moegen_runtime::ep::{
    AllGatherPlan, AllToAllPlan, CollectiveError, EpError, EpMode, EpPartition, EpPlan,
    EpWorkspace, ExpertParallel, NcclCollective, NcclId,
};
use moegen_runtime::layer::{
    DeviceModel, DeviceSlice, DispatchTable, ForwardIo, KernelSet, LayerConfig, LayerError,
    MoeLayer, arch_of,
};
use moegen_runtime::reference::ExpertEpilogue;

use crate::bench::{BenchError, BenchShape, Inputs, MxExpert, Variant, upload_weights};

/// What can go wrong running expert parallelism on devices.
#[derive(Debug, thiserror::Error)]
pub enum EpRunError {
    /// The expert-parallel layer or its collective refused.
    #[error(transparent)]
    Ep(#[from] EpError),
    /// Weights or shapes.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// A rank's layer.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// A device.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// NCCL.
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    /// A `MOEGEN_EP_*` variable.
    #[error("{var}: {reason}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Why it is refused.
        reason: String,
    },
}

/// The ranks this process drives, with their layers, workspaces and communicator.
pub struct Ranks {
    /// One backend per driven rank, on its own device and stream.
    pub backends: Vec<CudaBackend>,
    /// The communicator (every rank's stream is its backend's).
    pub coll: NcclCollective,
    /// The layer.
    pub ep: ExpertParallel,
    /// One workspace per driven rank.
    pub workspaces: Vec<EpWorkspace>,
}

/// A rank's window of `full` (every expert of the model) as a bench shape.
pub fn window_shape(full: &BenchShape, p: &EpPartition, rank: usize) -> BenchShape {
    let l = p.local_experts();
    BenchShape { local_experts: l, expert_offset: rank * l, ..full.clone() }
}

/// The shape of rank `rank`'s layer in `mode`: its window, top-1 in mode (b).
pub fn layer_shape(full: &BenchShape, p: &EpPartition, rank: usize, mode: EpMode) -> BenchShape {
    let w = window_shape(full, p, rank);
    match mode {
        EpMode::AllGather => w,
        EpMode::AllToAll => BenchShape { top_k: 1, ..w },
    }
}

/// `a` or `b`, as the binaries' `--ep-mode` names the modes.
pub fn mode_name(mode: EpMode) -> &'static str {
    match mode {
        EpMode::AllGather => "all-gather (a)",
        EpMode::AllToAll => "all-to-all (b)",
    }
}

/// A layer of `shape`'s window on `b` with the analytic dispatch table up to `max_tokens`;
/// returns it with the tile sizes its tactics use.
pub fn build_layer(
    b: &mut CudaBackend,
    shape: &BenchShape,
    weights: &[MxExpert],
    v: Variant,
    finalize: FinalizeMode,
    max_tokens: usize,
    gs_x: f32,
) -> Result<(MoeLayer, Vec<TileSize>), EpRunError> {
    let ms = shape.moe_shape()?;
    let arch = arch_of(b);
    let lw = upload_weights(b, &ms, weights, v, gs_x, &ExpertEpilogue::default())?;
    let config = LayerConfig {
        finalize,
        activations: v.activations,
        recipe: v.recipe,
        ..LayerConfig::new(ms)
    };
    // The variant's kernels: the built-in set, with Hopper's Fast GEMM1s for a Fast variant.
    let kernels = v.kernels()?;
    let max = max_tokens as u64;
    let tactics = MoeLayer::candidates(&config, &kernels, max, arch, v.format)?;
    let dev = DeviceModel::for_layer(arch, v.activations).with_sms(b.sm_count());
    let table = DispatchTable::analytic(&ms, max, &tactics, &dev)?;
    let mut tiles: Vec<TileSize> = tactics.iter().map(MoeTactic::tile).collect();
    tiles.sort_by_key(|t| t.rows());
    tiles.dedup();
    Ok((MoeLayer::new(b, config, lw, &kernels, table)?, tiles))
}

impl Ranks {
    /// Builds the driven ranks' layers and workspaces in `mode`: rank `r`'s experts are
    /// `weights(r)` (its window of `full`), `max_tokens` tokens per rank.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mut backends: Vec<CudaBackend>,
        coll: NcclCollective,
        full: &BenchShape,
        weights: &dyn Fn(usize) -> Vec<MxExpert>,
        v: Variant,
        (mode, finalize): (EpMode, FinalizeMode),
        max_tokens: usize,
        gs_x: f32,
    ) -> Result<Self, EpRunError> {
        use moegen_runtime::ep::Collective;
        let p = EpPartition::new(full.experts, coll.world(), full.top_k)?;
        let deterministic = finalize == FinalizeMode::Deterministic;
        let plan: EpPlan = match mode {
            EpMode::AllGather => {
                AllGatherPlan::new(p, max_tokens, full.hidden, deterministic)?.into()
            }
            EpMode::AllToAll => AllToAllPlan::new(p, max_tokens, full.hidden)?.into(),
        };
        let ranks = coll.driven().to_vec();
        let (mut layers, mut workspaces) = (Vec::new(), Vec::new());
        for (&r, b) in ranks.iter().zip(backends.iter_mut()) {
            let shape = layer_shape(full, &p, r, mode);
            let (layer, tiles) =
                build_layer(b, &shape, &weights(r), v, finalize, plan.layer_tokens(), gs_x)?;
            let spec = match &plan {
                EpPlan::AllGather(a) => {
                    a.workspace_spec(full.intermediate, tiles, arch_of(b), v.activations)
                }
                EpPlan::AllToAll(a) => a.workspace_spec(
                    full.intermediate,
                    tiles,
                    deterministic,
                    arch_of(b),
                    v.activations,
                ),
            };
            workspaces.push(EpWorkspace::new(b, &KernelSet::builtin(), plan.clone(), r, spec)?);
            layers.push(layer);
        }
        let ep = ExpertParallel::with_mode(p, mode, &ranks, layers)?;
        Ok(Self { backends, coll, ep, workspaces })
    }

    /// Frees the layers and workspaces; gives the backends and communicator back.
    pub fn into_parts(mut self) -> Result<(Vec<CudaBackend>, NcclCollective), EpRunError> {
        let mut bs: Vec<&mut dyn Backend> =
            self.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
        let released = self.ep.release(&mut bs);
        let mut first: Result<(), EpRunError> = released.map_err(Into::into);
        for (ws, b) in self.workspaces.into_iter().zip(self.backends.iter_mut()) {
            let r = ws.release(b);
            if first.is_ok() {
                first = r.map_err(Into::into);
            }
        }
        first?;
        Ok((self.backends, self.coll))
    }

    /// Uploads each driven rank's rows of `inputs` (`G·n` tokens, rank `r` holding rows
    /// `[r·n, (r+1)·n)`) and allocates its output.
    pub fn upload(&mut self, inputs: &Inputs, n: usize) -> Result<Vec<ForwardIo>, EpRunError> {
        let (h, k) = (inputs.x.len() / inputs.tokens, inputs.ids.len() / inputs.tokens);
        let mut ios = Vec::new();
        for (&r, b) in self.ep.ranks().iter().zip(self.backends.iter_mut()) {
            ios.push(rank_io(b, inputs, r * n..(r + 1) * n, h, k)?);
        }
        Ok(ios)
    }

    /// One eager step.
    pub fn forward(&mut self, ios: &[ForwardIo]) -> Result<(), EpRunError> {
        let mut bs: Vec<&mut dyn Backend> =
            self.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
        let ws: Vec<&EpWorkspace> = self.workspaces.iter().collect();
        self.ep.forward(&mut self.coll, &mut bs, &ws, ios)?;
        Ok(self.ep.check_errors(&mut bs, &ws)?)
    }

    /// One graph per driven rank for a step over `ios`.
    pub fn capture(
        &mut self,
        ios: &[ForwardIo],
    ) -> Result<Vec<moegen_runtime::backend::GraphId>, EpRunError> {
        let mut bs: Vec<&mut dyn Backend> =
            self.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
        let ws: Vec<&EpWorkspace> = self.workspaces.iter().collect();
        Ok(self.ep.capture(&mut self.coll, &mut bs, &ws, ios)?)
    }

    /// Each driven rank's output, in driven order, concatenated.
    pub fn outputs(&mut self, ios: &[ForwardIo]) -> Result<Vec<u16>, EpRunError> {
        let mut out = Vec::new();
        for (b, io) in self.backends.iter_mut().zip(ios) {
            let bytes = b.download(io.output.ptr, io.output.bytes as usize)?;
            out.extend(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])));
        }
        Ok(out)
    }

    /// Frees the step's buffers.
    pub fn free(&mut self, ios: &[ForwardIo]) -> Result<(), EpRunError> {
        for (b, io) in self.backends.iter_mut().zip(ios) {
            let ptrs =
                [io.activations.ptr, io.expert_ids.ptr, io.expert_weights.ptr, io.output.ptr];
            b.free_all(&ptrs)?;
        }
        Ok(())
    }
}

/// `rows` of `inputs` uploaded to `b`, with an output buffer.
pub fn rank_io(
    b: &mut dyn Backend,
    inputs: &Inputs,
    rows: std::ops::Range<usize>,
    h: usize,
    k: usize,
) -> Result<ForwardIo, EpRunError> {
    let mut up = |bytes: Vec<u8>| -> Result<DeviceSlice, EpRunError> {
        let len = bytes.len() as u64;
        Ok(DeviceSlice::new(b.upload_new(&bytes)?, len))
    };
    let x: Vec<u8> = inputs.x[rows.start * h..rows.end * h]
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect();
    let ids: Vec<u8> =
        inputs.ids[rows.start * k..rows.end * k].iter().flat_map(|v| v.to_le_bytes()).collect();
    let w: Vec<u8> =
        inputs.weights[rows.start * k..rows.end * k].iter().flat_map(|v| v.to_le_bytes()).collect();
    let activations = up(x)?;
    let expert_ids = up(ids)?;
    let expert_weights = up(w)?;
    let bytes = rows.len() * h * 2;
    let output = DeviceSlice::new(b.alloc(bytes)?, bytes as u64);
    Ok(ForwardIo { tokens: rows.len(), activations, expert_ids, expert_weights, output })
}

/// `MOEGEN_EP_RANK`: this process's rank, one process per GPU (unset: one process drives
/// every rank).
pub const RANK_ENV: &str = "MOEGEN_EP_RANK";
/// `MOEGEN_EP_WORLD`: the ranks of the communicator (with `MOEGEN_EP_RANK`).
pub const WORLD_ENV: &str = "MOEGEN_EP_WORLD";
/// `MOEGEN_EP_ID_FILE`: where rank 0 writes NCCL's 128-byte unique id and the other ranks
/// read it (a path every process sees).
pub const ID_FILE_ENV: &str = "MOEGEN_EP_ID_FILE";
/// `MOEGEN_EP_DEVICE`: the GPU ordinal of this process's rank (default: the rank).
pub const DEVICE_ENV: &str = "MOEGEN_EP_DEVICE";

fn env_usize(var: &'static str) -> Result<Option<usize>, EpRunError> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(EpRunError::Env { var, reason: e.to_string() }),
        Ok(s) => {
            s.parse().map(Some).map_err(|e| EpRunError::Env { var, reason: format!("{s:?}: {e}") })
        }
    }
}

/// One process per rank, from `MOEGEN_EP_RANK`, `MOEGEN_EP_WORLD`, `MOEGEN_EP_ID_FILE` and
/// `MOEGEN_EP_DEVICE`: this process's backend and communicator; `None` when
/// `MOEGEN_EP_RANK` is unset. Rank 0 writes the id file; the others wait for it (60 s).
pub fn env_rank() -> Result<Option<(CudaBackend, NcclCollective)>, EpRunError> {
    let Some(rank) = env_usize(RANK_ENV)? else {
        return Ok(None);
    };
    let world = env_usize(WORLD_ENV)?
        .ok_or(EpRunError::Env { var: WORLD_ENV, reason: "required with MOEGEN_EP_RANK".into() })?;
    if rank >= world {
        return Err(EpError::RankOutOfRange { rank, ranks: world }.into());
    }
    let file: PathBuf = std::env::var_os(ID_FILE_ENV)
        .ok_or(EpRunError::Env { var: ID_FILE_ENV, reason: "required with MOEGEN_EP_RANK".into() })?
        .into();
    let device = env_usize(DEVICE_ENV)?.unwrap_or(rank);
    let backend = CudaBackend::new(device)?;
    let io = |e: std::io::Error| EpRunError::Env {
        var: ID_FILE_ENV,
        reason: format!("{}: {e}", file.display()),
    };
    let id = if rank == 0 {
        let id = NcclId::new()?;
        // Written whole under another name, then renamed: readers never see a partial id.
        let tmp = file.with_extension("partial");
        std::fs::write(&tmp, id.to_bytes()).map_err(io)?;
        std::fs::rename(&tmp, &file).map_err(io)?;
        id
    } else {
        let start = Instant::now();
        loop {
            match std::fs::read(&file) {
                Ok(b) if b.len() == 128 => {
                    let mut bytes = [0u8; 128];
                    bytes.copy_from_slice(&b);
                    break NcclId::from_bytes(bytes);
                }
                _ if start.elapsed() > Duration::from_secs(60) => {
                    return Err(EpRunError::Env {
                        var: ID_FILE_ENV,
                        reason: format!(
                            "{}: no 128-byte id from rank 0 after 60 s",
                            file.display()
                        ),
                    });
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    };
    let coll = NcclCollective::from_rank(&backend, rank, world, id)?;
    Ok(Some((backend, coll)))
}
