//! The problem shapes a target's GEMM kernels accept, checked before anything is launched.

use super::error::{PlanError, Result};
use crate::resources::MMA_K;
use crate::target::Target;

/// The multiple H and I must be for `target`'s GEMM kernels: both are K dimensions of one
/// GEMM (H of GEMM1, I of GEMM2) and N dimensions of the other. SM100 consumes K in whole
/// MMAs (K = 64; a last, partial K stage issues only its MMAs) and clips N tails; Hopper
/// in 64-wide weight fragments.
pub fn gemm_shape_multiple(target: Target) -> u64 {
    match target {
        Target::Sm100f | Target::Sm100a => u64::from(MMA_K),
        Target::Sm90a => u64::from(crate::resources::SM90_K_STAGE),
    }
}

/// Checks one dimension (`what` names it in the error) against `target`'s GEMM kernels.
pub fn check_gemm_dim(target: Target, what: &'static str, value: u64) -> Result<()> {
    let m = gemm_shape_multiple(target);
    if value == 0 {
        return Err(PlanError::Zero { what });
    }
    if !value.is_multiple_of(m) {
        return Err(PlanError::Alignment {
            what,
            value,
            multiple: m,
            why: match target {
                Target::Sm100f | Target::Sm100a => " (the sm_100 GEMM kernels' K = 64 MMAs)",
                Target::Sm90a => " (the sm_90a GEMM kernels' 64-wide weight fragments)",
            },
        });
    }
    Ok(())
}

/// Checks H and I against `target`'s GEMM kernels.
pub fn check_gemm_shape(target: Target, hidden: u64, intermediate: u64) -> Result<()> {
    check_gemm_dim(target, "hidden size", hidden)?;
    check_gemm_dim(target, "intermediate size", intermediate)
}
