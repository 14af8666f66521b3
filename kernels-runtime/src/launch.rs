//! Building a launch from a kernel's typed ABI: every argument comes from the parameter list
//! the kernel was generated with (`KernelInfo::params`), resolved against [`Bindings`]; the
//! grid, block, cluster and shared memory come from its launch facts. Nothing here restates
//! a kernel's interface.

use std::collections::BTreeMap;

use moegen_dsl::abi::{
    Buffer, GridRule, KernelId, KernelInfo, MapDims, ParamKind, Scalar, persistent_units,
    tensor_map,
};

use moegen_dsl::GemmKind;
use moegen_dsl::gpu::clusters_on_gpcs;
use moegen_dsl::sm90_tactics::sm90_split_k_fits;

use crate::backend::{Backend, BackendError, DevicePtr, KernelArg, LaunchShape, TensorMapSpec};

/// A launch that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// A parameter with no value bound.
    #[error("{kernel}: parameter {param} ({what}) has no value bound")]
    Unbound {
        /// Kernel.
        kernel: &'static str,
        /// Parameter name.
        param: &'static str,
        /// What it carries.
        what: String,
    },
    /// A scalar that does not fit the kernel's `.u32`.
    #[error("{what:?} = {value} does not fit a 32-bit kernel parameter")]
    ScalarTooLarge {
        /// Which scalar.
        what: Scalar,
        /// Its value.
        value: u64,
    },
    /// A validation kernel's positional argument of the wrong type, or too few/many.
    #[error("{kernel}: {reason}")]
    Arguments {
        /// Kernel.
        kernel: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A grid that cannot be formed (no work, or a persistent tactic that does not apply).
    #[error("{kernel}: {reason}")]
    Grid {
        /// Kernel.
        kernel: &'static str,
        /// Why.
        reason: String,
    },
    /// The backend failed (tensor-map encoding).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The values a launch binds its parameters to.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    scalars: BTreeMap<Scalar, u32>,
    buffers: BTreeMap<Buffer, DevicePtr>,
    map_dims: Option<MapDims>,
    positional: Vec<KernelArg>,
}

impl Bindings {
    /// No values yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Binds a scalar, checking it fits the kernels' `.u32`.
    pub fn scalar(mut self, s: Scalar, value: u64) -> Result<Self, LaunchError> {
        let v = u32::try_from(value).map_err(|_| LaunchError::ScalarTooLarge { what: s, value })?;
        self.scalars.insert(s, v);
        Ok(self)
    }
    /// Binds a GEMM's live-tile mask (`Scalar::LiveTileMaskLo`/`Hi`): bit `L` set, the GEMM
    /// does its units when the routing leaves `L` live tiles (bit 63: 63 or more);
    /// `u64::MAX`: always.
    pub fn live_tile_mask(mut self, mask: u64) -> Self {
        self.scalars.insert(Scalar::LiveTileMaskLo, mask as u32);
        self.scalars.insert(Scalar::LiveTileMaskHi, (mask >> 32) as u32);
        self
    }
    /// Binds a buffer's device address.
    pub fn buffer(mut self, b: Buffer, ptr: DevicePtr) -> Self {
        self.buffers.insert(b, ptr);
        self
    }
    /// Sets the problem sizes tensor maps are laid out for.
    pub fn map_dims(mut self, d: MapDims) -> Self {
        self.map_dims = Some(d);
        self
    }
    /// Positional arguments of a validation kernel (checked against its parameter types).
    pub fn positional(mut self, args: Vec<KernelArg>) -> Self {
        self.positional = args;
        self
    }
    /// The device address bound to `b`, if any.
    pub fn buffer_ptr(&self, b: Buffer) -> Option<DevicePtr> {
        self.buffers.get(&b).copied()
    }
}

/// The argument list of `k`, in ABI order: scalars and buffers from `bind`, tensor maps
/// encoded by the backend from the ABI's layout over the bound buffer.
pub fn kernel_args(
    backend: &mut dyn Backend,
    k: &KernelInfo,
    bind: &Bindings,
) -> Result<Vec<KernelArg>, LaunchError> {
    let unbound =
        |param: &'static str, what: String| LaunchError::Unbound { kernel: k.name, param, what };
    let mut out = Vec::with_capacity(k.params.len());
    let mut positional = bind.positional.iter();
    for p in k.params {
        let arg = match p.kind {
            ParamKind::Scalar(s) => KernelArg::U32(
                *bind.scalars.get(&s).ok_or_else(|| unbound(p.name, format!("{s:?}")))?,
            ),
            ParamKind::Buffer(b) => KernelArg::Ptr(
                bind.buffer_ptr(b).ok_or_else(|| unbound(p.name, b.name().to_owned()))?,
            ),
            ParamKind::TensorMap(m) => {
                let KernelId::Gemm(key) = k.id else {
                    return Err(unbound(p.name, format!("tensor map {m:?} outside a GEMM")));
                };
                let dims = bind.map_dims.ok_or_else(|| unbound(p.name, "map dims".into()))?;
                let layout = tensor_map::layout(m, &key, &dims);
                let address = bind
                    .buffer_ptr(layout.buffer)
                    .ok_or_else(|| unbound(p.name, layout.buffer.name().to_owned()))?;
                let spec = TensorMapSpec {
                    element: layout.element,
                    address,
                    dims: layout.dims,
                    strides: layout.strides,
                    box_dims: layout.box_dims,
                    swizzle: layout.swizzle,
                };
                KernelArg::TensorMap(Box::new(backend.encode_tensor_map(&spec)?))
            }
            ParamKind::Validation(ty) => {
                let a = positional.next().ok_or_else(|| LaunchError::Arguments {
                    kernel: k.name,
                    reason: format!("no positional argument for {}", p.name),
                })?;
                if a.ty() != ty {
                    return Err(LaunchError::Arguments {
                        kernel: k.name,
                        reason: format!("{} takes {ty:?}, given {:?}", p.name, a.ty()),
                    });
                }
                a.clone()
            }
        };
        out.push(arg);
    }
    if positional.next().is_some() {
        return Err(LaunchError::Arguments {
            kernel: k.name,
            reason: "more positional arguments than parameters".into(),
        });
    }
    Ok(out)
}

/// What a grid is sized from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GridInputs {
    /// Routes (tokens · top_k).
    pub routes: u64,
    /// Tokens.
    pub tokens: u64,
    /// H.
    pub hidden: u64,
    /// I.
    pub intermediate: u64,
    /// Length of the tile arrays.
    pub max_tiles: u64,
    /// Local experts (per-expert shared memory).
    pub local_experts: u64,
    /// SMs to fill with persistent CTAs.
    pub sm_count: u32,
    /// Rows of the permuted-row buffers (`max_tiles · T`).
    pub permuted_rows: u64,
}

/// The launch shape of `k` for a problem: a persistent GEMM gets as many CTAs as the SMs
/// hold at once (`ctas_per_sm` each, whole clusters), at most one per work unit. On a
/// device whose GPCs hold fewer clusters than that, [`launch_shape_on`].
pub fn launch_shape(k: &KernelInfo, g: &GridInputs) -> Result<LaunchShape, LaunchError> {
    launch_shape_holding(k, g, None)
}

/// The dynamic shared memory `k` launches with for `local_experts` local experts.
pub fn dynamic_smem(k: &KernelInfo, local_experts: usize) -> Result<u32, LaunchError> {
    k.launch.smem.bytes(local_experts).ok_or_else(|| LaunchError::Grid {
        kernel: k.name,
        reason: "shared memory overflows".into(),
    })
}

/// [`launch_shape`] for the device `b` runs it on: a persistent grid holds at most the
/// clusters (CTAs, without clusters) `b` runs at once (`Backend::resident_clusters`). The
/// static schedule gives every cluster of the grid its share of the units, so a cluster
/// beyond those would start its share only when another cluster has finished all of its
/// own, up to doubling the kernel's time (an H100's driver runs 92 clusters of 4 at 3 CTAs
/// per SM, not 99; and a device holding fewer CTAs per SM than the resource model's would do
/// the same to any persistent GEMM).
pub fn launch_shape_on(
    b: &mut dyn Backend,
    k: &'static KernelInfo,
    g: &GridInputs,
) -> Result<LaunchShape, LaunchError> {
    let shape = launch_shape(k, g)?;
    if k.launch.grid != GridRule::Persistent {
        return Ok(shape);
    }
    let held = b.resident_clusters(k, shape.dynamic_smem)?;
    launch_shape_holding(k, g, held)
}

/// [`launch_shape`] on a device that runs at most `resident_clusters` clusters (CTAs,
/// without clusters) of `k` at once (`None`: as many as its SMs hold, `sm_count` ×
/// `ctas_per_sm` / cluster). Only a persistent grid is held to it: the other grid rules size
/// work, not residency.
pub fn launch_shape_holding(
    k: &KernelInfo,
    g: &GridInputs,
    resident_clusters: Option<u32>,
) -> Result<LaunchShape, LaunchError> {
    let fail = |reason: String| LaunchError::Grid { kernel: k.name, reason };
    let f = &k.launch;
    let smem = dynamic_smem(k, usize::try_from(g.local_experts).unwrap_or(usize::MAX))?;
    let grid: u64 = match f.grid {
        GridRule::PerRoutes { per_block } => g.routes.div_ceil(u64::from(per_block.max(1))),
        GridRule::Single => 1,
        GridRule::GridStride { values_per_thread, max_blocks } => {
            let items = g
                .tokens
                .checked_mul(g.hidden)
                .ok_or_else(|| fail("tokens × hidden overflows".into()))?
                / u64::from(values_per_thread.max(1));
            items.div_ceil(u64::from(f.threads.max(1))).min(u64::from(max_blocks))
        }
        GridRule::OneCluster => u64::from(f.cluster),
        GridRule::PerRows { rows, rows_per_block, max_blocks } => {
            use moegen_dsl::abi::RowCount;
            let n = match rows {
                RowCount::Tokens => g.tokens,
                RowCount::PermutedRows => g.permuted_rows,
            };
            n.div_ceil(u64::from(rows_per_block.max(1))).min(u64::from(max_blocks))
        }
        GridRule::Persistent => {
            let KernelId::Gemm(key) = k.id else {
                return Err(fail("a persistent grid needs a GEMM".into()));
            };
            let units =
                persistent_units(&key, g.max_tiles, g.hidden, g.intermediate).ok_or_else(|| {
                    fail("the N tiles do not divide into this tactic's clusters".into())
                })?;
            if key.split_k > 1 {
                // Every rank of a split needs a K stage of its own, or its accumulators would
                // hold nothing of this unit.
                let k = match key.gemm {
                    GemmKind::Gemm1 => g.hidden,
                    GemmKind::Gemm2 => g.intermediate,
                };
                let stage = key.activations.sm90_k_stage();
                if !sm90_split_k_fits(k, stage, key.split_k) {
                    let stages = k.div_ceil(u64::from(stage));
                    return Err(fail(format!(
                        "K {k} has {stages} stages, fewer than the {} CTAs that split it",
                        key.split_k
                    )));
                }
            }
            // Whole CTA slots of the SMs, GPCs aside: the driver's count bounds it below.
            let slots = clusters_on_gpcs(&[g.sm_count], f.ctas_per_sm, f.cluster);
            let mut clusters = u64::from(slots.max(1));
            if let Some(held) = resident_clusters {
                if held == 0 {
                    let what = match f.cluster {
                        0 | 1 => "CTA".to_owned(),
                        n => format!("cluster of {n} CTAs"),
                    };
                    return Err(fail(format!(
                        "the device runs no {what} of this kernel at once ({smem} bytes of \
                         shared memory each)"
                    )));
                }
                clusters = clusters.min(u64::from(held));
            }
            units.min(clusters) * u64::from(f.cluster)
        }
    };
    if grid == 0 {
        return Err(fail("no work: the grid would be empty".into()));
    }
    let grid = u32::try_from(grid).map_err(|_| fail(format!("grid of {grid} CTAs")))?;
    Ok(LaunchShape { grid, block: f.threads, cluster: f.cluster, dynamic_smem: smem })
}
