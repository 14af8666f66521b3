//! The GPUs moegen models, one description each: the published throughput figures that both
//! the runtime's dispatch estimate (`moegen_runtime::layer::DeviceModel`) and codegen's
//! analytic per-role model (`moegen_codegen::perf::model::Machine`) build on, so that the two
//! cannot disagree about the machine.

use crate::tactic::Arch;

/// One GPU's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    /// SMs.
    pub sms: u32,
    /// Clock (GHz).
    pub clock_ghz: f64,
    /// Dense MACs per clock per SM at the MMA's operand types (block-scaled FP4 on SM100,
    /// bf16 on Hopper).
    pub macs_per_clock_per_sm: f64,
    /// HBM bandwidth (bytes/s).
    pub hbm_bytes_per_s: f64,
    /// Fraction of it a streaming kernel achieves.
    pub hbm_efficiency: f64,
    /// Launch, prologue and pipeline fill of one kernel (µs).
    pub launch_us: f64,
}

impl Gpu {
    /// B200 as ../shared/anchors.md §A2 states it: 148 SMs, 1.9 GHz, 16384 FP4 MAC/clk/SM
    /// (≈ 9.2 PFLOP/s), HBM 8 TB/s × 0.9, 2 µs fixed per kernel.
    pub const B200: Gpu = Gpu {
        sms: 148,
        clock_ghz: 1.9,
        macs_per_clock_per_sm: 16384.0,
        hbm_bytes_per_s: 8.0e12,
        hbm_efficiency: 0.9,
        launch_us: 2.0,
    };

    /// H200: 132 SMs, 1.83 GHz, 2048 dense bf16 MAC/clk/SM (989 TFLOP/s), HBM 4.8 TB/s × 0.9,
    /// 2 µs fixed per kernel.
    pub const H200: Gpu = Gpu {
        sms: 132,
        clock_ghz: 1.83,
        macs_per_clock_per_sm: 2048.0,
        hbm_bytes_per_s: 4.8e12,
        hbm_efficiency: 0.9,
        launch_us: 2.0,
    };

    /// The GPU moegen models for a generation: the B200 for SM100, the H200 for Hopper.
    pub const fn for_arch(arch: Arch) -> Gpu {
        match arch {
            Arch::Sm100 => Gpu::B200,
            Arch::Sm90 => Gpu::H200,
        }
    }

    /// Achievable HBM bandwidth (bytes/s): the bandwidth at the streaming efficiency.
    pub fn achievable_hbm_bytes_per_s(&self) -> f64 {
        self.hbm_bytes_per_s * self.hbm_efficiency
    }
}
