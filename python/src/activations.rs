//! The `activations=` option of the MXFP4 constructors: what GEMM1 multiplies the experts
//! by, which decides the kernels' generation, and the refusal of a GPU of another one.

use moegen_runtime::prelude::*;
use pyo3::prelude::*;

use crate::errors::{Error, Result};

/// What MXFP4 experts are multiplied by (Python: `activations="bf16"` or `"mxfp8"`); either
/// way the layer takes bf16 `x` and converts it itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mxfp4Activations {
    /// Hopper's A16 kernels: the weights dequantized exactly in registers.
    Bf16,
    /// SM100's `kind::mxf8f6f4` kernels: the weights kept MXFP4, `x` quantized to MXFP8.
    Mxfp8,
}

impl Mxfp4Activations {
    /// Python's spelling, as the option takes it.
    pub(crate) fn parse(value: &str) -> Result<Self> {
        match value {
            "bf16" => Ok(Self::Bf16),
            "mxfp8" => Ok(Self::Mxfp8),
            other => Err(Error::Value {
                input: "activations",
                reason: format!(
                    "{other:?}, expected \"bf16\" (Hopper's kernels) or \"mxfp8\" (SM100's \
                     kind::mxf8f6f4 kernels)"
                ),
            }),
        }
    }

    /// moegen's name for them.
    pub(crate) fn format(self) -> ActivationFormat {
        match self {
            Self::Bf16 => ActivationFormat::Bf16,
            Self::Mxfp8 => ActivationFormat::Mxfp8,
        }
    }
}

/// Python's spelling of a layer's activations (the `activations` attribute).
pub(crate) fn name(a: ActivationFormat) -> &'static str {
    match a {
        ActivationFormat::Nvfp4 => "nvfp4",
        ActivationFormat::Bf16 => "bf16",
        ActivationFormat::Fp8 => "fp8",
        ActivationFormat::Mxfp8 => "mxfp8",
    }
}

/// Python's spelling of a generation (the `arch` attribute).
pub(crate) fn arch_name(arch: Arch) -> &'static str {
    match arch {
        Arch::Sm90 => "sm90",
        Arch::Sm100 => "sm100",
    }
}

/// Refuses MXFP8 activations on a device of another generation than SM100: only SM100 has
/// `kind::mxf8f6f4` kernels, and running Hopper's instead would be another layer than the one
/// asked for. Other activations are left to moegen's own checks, as before this option.
pub(crate) fn check_generation(
    activations: ActivationFormat,
    arch: Arch,
    device: &str,
) -> Result<()> {
    if activations == ActivationFormat::Mxfp8 && arch != Arch::Sm100 {
        return Err(Error::Unsupported {
            what: format!("activations=\"mxfp8\" on {device} ({})", arch_name(arch)),
            reason: "MXFP8 activations run on SM100's kind::mxf8f6f4 kernels (B200, GB200, \
                     B300); Hopper has none (activations=\"bf16\" runs Hopper's kernels)",
        });
    }
    Ok(())
}

/// The check the constructors run once the device is open, over Python's spellings
/// (`moegen._native._check_generation`): the refusal is a GPU's, and this reaches it without
/// one.
#[pyfunction]
#[pyo3(name = "_check_generation")]
pub(crate) fn check_generation_py(activations: &str, arch: &str, device: &str) -> Result<()> {
    let activations = Mxfp4Activations::parse(activations)?.format();
    let arch = match arch {
        "sm90" => Arch::Sm90,
        "sm100" => Arch::Sm100,
        other => {
            return Err(Error::Value {
                input: "arch",
                reason: format!("{other:?}, expected \"sm90\" or \"sm100\""),
            });
        }
    };
    check_generation(activations, arch, device)
}
