//! One rank's expert-parallel workspace: its layer workspace, planned for the gathered
//! tokens (`G·N`, mode a) or the received routes (`G·C`, mode b), and the buffers of the
//! mode's plan, in one allocation of this crate. Shared by every layer of a model on that
//! rank, as [`Workspace`] is.

use moegen_dsl::{ActivationFormat, Arch, TileSize};

use super::{AllGatherPlan, AllToAllPlan, EpBuffer, EpError, EpPlan};
use crate::backend::{Backend, DevicePtr};
use crate::layer::{DeviceSlice, KernelSet, Workspace, WorkspaceSpec};

/// A rank's workspace for [`super::ExpertParallel`].
#[derive(Debug)]
pub struct EpWorkspace {
    rank: usize,
    plan: EpPlan,
    layer: Workspace,
    memory: DeviceSlice,
}

impl AllGatherPlan {
    /// The layer workspace a rank needs for this plan: every gathered token, the rank's
    /// window, H, and the caller's `intermediate`, tile sizes, generation and activations.
    pub fn workspace_spec(
        &self,
        intermediate: usize,
        tile_sizes: Vec<TileSize>,
        arch: Arch,
        activations: ActivationFormat,
    ) -> WorkspaceSpec {
        WorkspaceSpec {
            max_tokens: self.layer_tokens(),
            top_k: self.partition.top_k(),
            max_local_experts: self.partition.local_experts(),
            max_hidden: self.hidden,
            max_intermediate: intermediate,
            tile_sizes,
            deterministic: self.deterministic,
            arch,
            activations,
        }
    }
}

impl AllToAllPlan {
    /// The layer workspace a rank needs for this plan: a top-1 layer over a full block
    /// from every peer, the rank's window, H, and the caller's `intermediate`, tile sizes,
    /// finalize, generation and activations.
    pub fn workspace_spec(
        &self,
        intermediate: usize,
        tile_sizes: Vec<TileSize>,
        deterministic: bool,
        arch: Arch,
        activations: ActivationFormat,
    ) -> WorkspaceSpec {
        WorkspaceSpec {
            max_tokens: self.layer_tokens(),
            top_k: 1,
            max_local_experts: self.partition.local_experts(),
            max_hidden: self.hidden,
            max_intermediate: intermediate,
            tile_sizes,
            deterministic,
            arch,
            activations,
        }
    }
}

impl EpWorkspace {
    /// Allocates rank `rank`'s workspace on `b`: a layer workspace for `spec` (which must
    /// serve the plan: the plan's `workspace_spec` gives the smallest) and the plan's
    /// buffers.
    pub fn new(
        b: &mut dyn Backend,
        kernels: &KernelSet,
        plan: impl Into<EpPlan>,
        rank: usize,
        spec: WorkspaceSpec,
    ) -> Result<Self, EpError> {
        let plan = plan.into();
        let p = plan.partition();
        p.window(rank)?;
        let short = |field: &str, given: usize, needed: usize| EpError::Mismatch {
            rank,
            reason: format!("workspace spec {field} = {given}, the plan needs {needed}"),
        };
        if spec.max_tokens < plan.layer_tokens() {
            return Err(short("max_tokens", spec.max_tokens, plan.layer_tokens()));
        }
        if spec.top_k != plan.layer_top_k() {
            return Err(short("top_k", spec.top_k, plan.layer_top_k()));
        }
        if spec.max_local_experts < p.local_experts() {
            return Err(short("max_local_experts", spec.max_local_experts, p.local_experts()));
        }
        if spec.max_hidden < plan.hidden() {
            return Err(short("max_hidden", spec.max_hidden, plan.hidden()));
        }
        if let Some(deterministic) = plan.deterministic()
            && spec.deterministic != deterministic
        {
            return Err(EpError::Mismatch {
                rank,
                reason: format!(
                    "workspace spec deterministic = {}, the plan's is {deterministic}",
                    spec.deterministic
                ),
            });
        }
        let layer = Workspace::new(b, kernels, spec)?;
        let bytes = plan.layout().bytes.max(1);
        let memory = match usize::try_from(bytes) {
            Ok(n) => b.alloc(n),
            Err(_) => {
                let _ = layer.release(b);
                return Err(EpError::Mismatch {
                    rank,
                    reason: format!("{bytes} B of buffers do not fit this host's address space"),
                });
            }
        };
        let memory = match memory {
            Ok(ptr) => DeviceSlice::new(ptr, bytes),
            Err(e) => {
                // The allocation's error is the one to report.
                let _ = layer.release(b);
                return Err(e.into());
            }
        };
        Ok(Self { rank, plan, layer, memory })
    }

    /// Frees both allocations (after the stream's work); graphs captured with them must not
    /// be replayed afterwards.
    pub fn release(self, b: &mut dyn Backend) -> Result<(), EpError> {
        let freed = b.free(self.memory.ptr);
        self.layer.release(b)?;
        Ok(freed?)
    }

    /// The rank it serves.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Its plan.
    pub fn plan(&self) -> &EpPlan {
        &self.plan
    }
    /// The rank layer's workspace.
    pub fn layer_workspace(&self) -> &Workspace {
        &self.layer
    }

    /// The address of `buffer` (`None` when the plan's mode has none).
    pub fn ptr(&self, buffer: EpBuffer) -> Option<DevicePtr> {
        let (offset, _) = self.plan.layout().get(buffer)?;
        Some(DevicePtr(self.memory.ptr.0 + offset))
    }
}
