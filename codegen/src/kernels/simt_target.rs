//! Targets of the SIMT kernels (routing sort, activation quantization, deterministic
//! finalize): the SM100 family, and Hopper so the same kernels run on the H200s.

use std::fmt;

/// A SIMT kernel target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum SimtTarget {
    /// `sm_100f`.
    #[serde(rename = "sm_100f")]
    Sm100f,
    /// `sm_90a` (H100/H200).
    #[serde(rename = "sm_90a")]
    Sm90a,
}

impl SimtTarget {
    /// Both, SM100 first.
    pub const ALL: [SimtTarget; 2] = [SimtTarget::Sm100f, SimtTarget::Sm90a];
    /// `.target` name.
    pub fn name(self) -> &'static str {
        match self {
            SimtTarget::Sm100f => "sm_100f",
            SimtTarget::Sm90a => "sm_90a",
        }
    }
    /// Short tag used in kernel names.
    pub fn tag(self) -> &'static str {
        match self {
            SimtTarget::Sm100f => "sm100",
            SimtTarget::Sm90a => "sm90",
        }
    }
    /// Whether `cvt.rn.satfinite.e2m1x2.f32` exists (sm_100 family only).
    pub fn has_e2m1_cvt(self) -> bool {
        self == SimtTarget::Sm100f
    }
}

impl fmt::Display for SimtTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
