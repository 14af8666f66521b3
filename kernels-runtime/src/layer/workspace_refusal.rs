//! Whether a kernel set can serve a workspace spec at all, checked when the workspace is
//! made: a spec no kernel can serve is refused there, naming the field at fault, instead of
//! surfacing at the first `forward`.

use moegen_dsl::abi::KernelId;
use moegen_dsl::plan::{PlanError, check_gemm_dim};
use moegen_dsl::{
    ActivationFormat, Arch, FinalizeMode, GemmKind, GemmTactic, MoeTactic, TileSize, tactics_for,
};

use super::candidates::{Rejection, cover, shape_target};
use super::kernel_set::KernelSet;
use super::memory::WorkspaceSpec;

/// Why a kernel set cannot serve a [`WorkspaceSpec`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceRefusal {
    /// The set holds no tactic of the spec's generation (both GEMMs of one tactic).
    #[error("arch: the kernel set holds no {arch:?} tactic")]
    NoKernels {
        /// `spec.arch`.
        arch: Arch,
    },
    /// The set holds tactics of the spec's generation, but none for its activations.
    #[error("activations: the kernel set holds no {arch:?} tactic for {activations:?} activations")]
    NoKernelsFor {
        /// `spec.arch`.
        arch: Arch,
        /// `spec.activations`.
        activations: ActivationFormat,
    },
    /// A tile size the set's tactics of that generation do not use (or not one of the
    /// generation's tile sizes at all).
    #[error(
        "tile_sizes: tile {tile} is not served: the set's {arch:?} tactics use tiles {}",
        tiles(served)
    )]
    Tile {
        /// The tile size.
        tile: TileSize,
        /// `spec.arch`.
        arch: Arch,
        /// The tiles the set's tactics of `arch` use.
        served: Vec<TileSize>,
    },
    /// `max_hidden` or `max_intermediate` is not a multiple of the generation's granularity
    /// (64).
    #[error(transparent)]
    Shape(PlanError),
    /// No tactic of the set (at the spec's tile sizes) covers `max_hidden` or
    /// `max_intermediate` with its clusters.
    #[error(
        "{field} = {value}: no tactic of the set at the spec's tile sizes serves it ({count} tried; e.g. {example})"
    )]
    NotCovered {
        /// `max_hidden` or `max_intermediate`.
        field: &'static str,
        /// Its value.
        value: usize,
        /// Tactics tried.
        count: usize,
        /// The first tactic's reason.
        example: Box<Rejection>,
    },
    /// `deterministic` asks for the deterministic finalize's scratch, and the set has no
    /// deterministic GEMM2, or it does not, and the set's GEMM2s are all deterministic.
    #[error(
        "deterministic = {deterministic}: the set's {arch:?} GEMM2 kernels finalize only with {}",
        modes(held)
    )]
    Finalize {
        /// `spec.deterministic`.
        deterministic: bool,
        /// `spec.arch`.
        arch: Arch,
        /// The finalize modes the set's GEMM2 kernels of `arch` have.
        held: Vec<FinalizeMode>,
    },
}

fn tiles(t: &[TileSize]) -> String {
    let rows: Vec<String> = t.iter().map(|t| t.to_string()).collect();
    format!("{{{}}}", rows.join(", "))
}

fn modes(m: &[FinalizeMode]) -> String {
    let names: Vec<String> = m.iter().map(|m| format!("{m:?}")).collect();
    names.join(" and ")
}

/// Checks that `set` can serve `spec`: it holds tactics of `spec.arch` for its activations
/// at every tile size of the spec, `max_hidden` and `max_intermediate` are sizes one of those tactics serves (the
/// spec's largest layer has them), and its GEMM2 finalize modes match `deterministic`.
/// `max_intermediate` is judged as a gated layer's (GEMM1 N = 2I): the spec carries no
/// activation, so a ReLU² layer (N = I) that a kernel of the set cannot cover passes here and
/// is refused, naming the tactic, by `MoeLayer::new`'s candidate check.
pub fn check_spec(set: &KernelSet, spec: &WorkspaceSpec) -> Result<(), WorkspaceRefusal> {
    let arch = spec.arch;
    let of_arch: Vec<(HeldGemm, ActivationFormat)> = set
        .kernels()
        .iter()
        .filter_map(|k| match k.id {
            KernelId::Gemm(key) if key.arch() == arch => key
                .tactic()
                .ok()
                .map(|t| (HeldGemm { tactic: t, finalize: key.finalize }, key.activations)),
            _ => None,
        })
        .collect();
    let tactics_of = |gemms: &[&HeldGemm]| -> Vec<MoeTactic> {
        let held = |g: &GemmTactic| gemms.iter().any(|k| k.tactic == *g);
        tactics_for(arch)
            .into_iter()
            .filter(|t| held(t.gemm1()) && t.gemm1_wide().is_none_or(held) && held(t.gemm2()))
            .collect()
    };
    if tactics_of(&of_arch.iter().map(|(g, _)| g).collect::<Vec<_>>()).is_empty() {
        return Err(WorkspaceRefusal::NoKernels { arch });
    }
    let gemms: Vec<&HeldGemm> =
        of_arch.iter().filter(|(_, a)| *a == spec.activations).map(|(g, _)| g).collect();
    let tactics = tactics_of(&gemms);
    if tactics.is_empty() {
        return Err(WorkspaceRefusal::NoKernelsFor { arch, activations: spec.activations });
    }
    let mut served: Vec<TileSize> = tactics.iter().map(MoeTactic::tile).collect();
    served.sort();
    served.dedup();
    if let Some(&tile) = spec.tile_sizes.iter().find(|t| !served.contains(t)) {
        return Err(WorkspaceRefusal::Tile { tile, arch, served });
    }
    let target = shape_target(arch);
    for (field, value) in
        [("max_hidden", spec.max_hidden), ("max_intermediate", spec.max_intermediate)]
    {
        check_gemm_dim(target, field, value as u64).map_err(WorkspaceRefusal::Shape)?;
    }
    let at_tiles: Vec<&MoeTactic> =
        tactics.iter().filter(|t| spec.tile_sizes.contains(&t.tile())).collect();
    for (field, value, kind) in [
        ("max_hidden", spec.max_hidden, GemmKind::Gemm2),
        ("max_intermediate", spec.max_intermediate, GemmKind::Gemm1),
    ] {
        let dim = match kind {
            GemmKind::Gemm1 => "intermediate size",
            GemmKind::Gemm2 => "hidden size",
        };
        let gemm = |t: &MoeTactic| match kind {
            GemmKind::Gemm1 => *t.gemm1(),
            GemmKind::Gemm2 => *t.gemm2(),
        };
        let results: Vec<Result<(), Rejection>> =
            at_tiles.iter().map(|t| cover(&gemm(t), dim, value as u64)).collect();
        if !results.iter().any(Result::is_ok) {
            let count = results.len();
            if let Some(Err(example)) = results.into_iter().next() {
                return Err(WorkspaceRefusal::NotCovered {
                    field,
                    value,
                    count,
                    example: Box::new(example),
                });
            }
        }
    }
    let mut finalize: Vec<FinalizeMode> = Vec::new();
    for k in gemms.iter().filter(|k| k.tactic.kind() == GemmKind::Gemm2) {
        if !finalize.contains(&k.finalize) {
            finalize.push(k.finalize);
        }
    }
    let wanted =
        if spec.deterministic { FinalizeMode::Deterministic } else { FinalizeMode::BulkReduceAdd };
    if !finalize.contains(&wanted) {
        return Err(WorkspaceRefusal::Finalize {
            deterministic: spec.deterministic,
            arch,
            held: finalize,
        });
    }
    Ok(())
}

/// The parts of a GEMM kernel's key this check reads.
struct HeldGemm {
    tactic: GemmTactic,
    finalize: FinalizeMode,
}
