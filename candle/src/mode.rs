//! Which kernels run a block: its checkpoint layout and activations choose them, and they
//! decide the simulator's generation on the CPU and the generation a GPU must be.

use moegen_dsl::{ActivationFormat, Arch};
use moegen_runtime::backend::sim::SimBackend;

use crate::block::CheckpointLayout;
use crate::error::MoeBlockError;

/// The kernels a block runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernels {
    /// gpt-oss's MXFP4 with bf16 activations: Hopper's A16 kernels.
    HopperA16,
    /// gpt-oss's MXFP4 kept MXFP4 with MXFP8 activations: SM100's `kind::mxf8f6f4` kernels.
    Sm100Mxfp8,
    /// ModelOpt's NVFP4 with NVFP4 activations: the NVFP4 kernels of either generation.
    Nvfp4,
}

impl Kernels {
    /// The kernels of `layout` with `activations`, or the refusal of a pair no kernels serve.
    pub(crate) fn of(
        layout: CheckpointLayout,
        activations: ActivationFormat,
    ) -> Result<Self, MoeBlockError> {
        match (layout, activations) {
            (CheckpointLayout::GptOssMxfp4(_), ActivationFormat::Bf16) => Ok(Self::HopperA16),
            (CheckpointLayout::GptOssMxfp4(_), ActivationFormat::Mxfp8) => Ok(Self::Sm100Mxfp8),
            (CheckpointLayout::ModelOptNvfp4, ActivationFormat::Nvfp4) => Ok(Self::Nvfp4),
            (CheckpointLayout::GptOssMxfp4(_), activations) => Err(MoeBlockError::Activations {
                activations,
                layout: "GptOssMxfp4",
                expected: "Bf16 (Hopper's kernels) or Mxfp8 (SM100's kind::mxf8f6f4 kernels)",
            }),
            (CheckpointLayout::ModelOptNvfp4, activations) => Err(MoeBlockError::Activations {
                activations,
                layout: "ModelOptNvfp4",
                expected: "Nvfp4 (quantized with the checkpoint's calibrated input scales)",
            }),
        }
    }

    /// moegen's simulator of the generation whose kernels these are (`Device::Cpu`).
    pub(crate) fn simulator(self) -> SimBackend {
        match self {
            Self::HopperA16 => SimBackend::hopper(),
            Self::Sm100Mxfp8 | Self::Nvfp4 => SimBackend::new(),
        }
    }

    /// Refuses MXFP8 on a GPU other than SM100: only SM100 has `kind::mxf8f6f4` kernels, and
    /// Hopper's would be another layer than the one asked for. The other kernels keep the
    /// runtime's own checks, as before activations were a choice.
    pub(crate) fn check_arch(self, arch: Arch, device: &str) -> Result<(), MoeBlockError> {
        if self == Self::Sm100Mxfp8 && arch != Arch::Sm100 {
            return Err(MoeBlockError::Generation {
                activations: ActivationFormat::Mxfp8,
                device: device.to_string(),
                arch,
                reason: "MXFP8 activations run on SM100's kind::mxf8f6f4 kernels (B200, GB200, \
                         B300); Hopper has none (ActivationFormat::Bf16 runs Hopper's kernels)",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moegen_dsl::epilogue_math::ActivationParams;

    // The refusal is a GPU's; the decision is tested here, on the arch a GPU would report.
    #[test]
    fn mxfp8_is_refused_off_sm100_naming_the_activations_and_the_generation() {
        let gpt_oss = CheckpointLayout::GptOssMxfp4(ActivationParams::GPT_OSS);
        let mx = Kernels::of(gpt_oss, ActivationFormat::Mxfp8).unwrap();
        let device = "Cuda { gpu_id: 0 }";
        let e = mx.check_arch(Arch::Sm90, device).unwrap_err();
        assert!(
            matches!(
                e,
                MoeBlockError::Generation {
                    activations: ActivationFormat::Mxfp8,
                    arch: Arch::Sm90,
                    ..
                }
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(text.starts_with("activations Mxfp8 cannot run on Cuda { gpu_id: 0 } (Sm90)"));
        assert!(text.contains("Hopper has none"), "{text}");
        mx.check_arch(Arch::Sm100, device).unwrap();
        // Hopper's path and NVFP4 are left as they were.
        let a16 = Kernels::of(gpt_oss, ActivationFormat::Bf16).unwrap();
        a16.check_arch(Arch::Sm90, device).unwrap();
        let nv = Kernels::of(CheckpointLayout::ModelOptNvfp4, ActivationFormat::Nvfp4).unwrap();
        nv.check_arch(Arch::Sm90, device).unwrap();
    }
}
