//! Compilation targets and the hardware limits the resource model plans against.

use std::fmt;
use std::str::FromStr;

use crate::options::EpilogueRecipe;

/// A PTX target moegen emits SM100 kernels for.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Target {
    /// `sm_100f` (default): one PTX for the whole sm_100 family (B200, GB200, B300),
    /// `.version 8.8`, scale spelling `.block16`.
    #[default]
    #[serde(rename = "sm_100f")]
    Sm100f,
    /// `sm_100a`: B200/GB200 only, same kernels.
    #[serde(rename = "sm_100a")]
    Sm100a,
    /// `sm_90a`: H100/H200 (wgmma, TMA; no tcgen05).
    #[serde(rename = "sm_90a")]
    Sm90a,
}

/// Per-CTA limits of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ResourceLimits {
    /// Largest dynamic shared memory one CTA may request (227 KiB on SM100).
    pub max_dynamic_smem: u32,
    /// 32-bit TMEM columns per SM.
    pub tmem_columns: u32,
    /// TMEM lanes (rows) per SM.
    pub tmem_lanes: u32,
    /// Most CTAs a (portable) cluster may hold.
    pub max_cluster_ctas: u32,
}

const SM100_LIMITS: ResourceLimits = ResourceLimits {
    max_dynamic_smem: 232_448,
    tmem_columns: 512,
    tmem_lanes: 128,
    max_cluster_ctas: 16,
};

const SM90_LIMITS: ResourceLimits = ResourceLimits {
    max_dynamic_smem: 232_448,
    tmem_columns: 0,
    tmem_lanes: 0,
    max_cluster_ctas: 8,
};

impl Target {
    /// Every target, default first.
    pub const ALL: [Target; 3] = [Target::Sm100f, Target::Sm100a, Target::Sm90a];

    /// The `.target` string.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm100f => "sm_100f",
            Target::Sm100a => "sm_100a",
            Target::Sm90a => "sm_90a",
        }
    }

    /// The epilogue recipe a target's kernels use unless told otherwise: `Fast` on SM100;
    /// `Exact` on Hopper (whose Fast GEMM1 exists for bf16 and FP8 activations, as an
    /// option).
    pub const fn default_recipe(self) -> EpilogueRecipe {
        match self.arch() {
            crate::tactic::Arch::Sm100 => EpilogueRecipe::Fast,
            crate::tactic::Arch::Sm90 => EpilogueRecipe::Exact,
        }
    }

    /// The generation whose kernels this target runs.
    pub const fn arch(self) -> crate::tactic::Arch {
        match self {
            Target::Sm100f | Target::Sm100a => crate::tactic::Arch::Sm100,
            Target::Sm90a => crate::tactic::Arch::Sm90,
        }
    }

    /// Architecture tag used in kernel names: `sm100` for the family-portable sm_100f (the
    /// default), `sm100a` for the arch-specific build (so one set can hold both without two
    /// kernels of one name), `sm90` for Hopper.
    pub const fn arch_tag(self) -> &'static str {
        match self {
            Target::Sm100f => "sm100",
            Target::Sm100a => "sm100a",
            Target::Sm90a => "sm90",
        }
    }

    /// The lowest `.version` that accepts everything emitted for the target (the `.block16`
    /// spelling needs 8.8; sm100-ptx.md §0).
    pub fn ptx_version(self) -> &'static str {
        "8.8"
    }

    /// Hardware limits.
    pub fn limits(self) -> ResourceLimits {
        match self {
            Target::Sm100f | Target::Sm100a => SM100_LIMITS,
            Target::Sm90a => SM90_LIMITS,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown target name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown target '{0}' (expected one of: sm_100f, sm_100a, sm_90a)")]
pub struct UnknownTarget(pub String);

impl FromStr for Target {
    type Err = UnknownTarget;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Target::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| UnknownTarget(s.to_owned()))
    }
}
