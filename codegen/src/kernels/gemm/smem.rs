//! Where a GEMM kernel's data lives in shared memory. (Still the fixed offsets sized for
//! 16 A/B and 2 accumulator stages; the allocator replaces them.)

use super::layout::GemmLayout;
use super::rings::RingBarriers;
use crate::ptx::smem::Region;
use crate::ptx::{KernelBuilder, Reg};

const OFF_FULL: u32 = 0;
const OFF_EMPTY: u32 = 128;
const OFF_ACC_FULL: u32 = 256;
const OFF_ACC_EMPTY: u32 = 272;
const OFF_GATHER_FULL: u32 = 288;
const OFF_TMEM_SLOT: u32 = 512;
const OFF_STAGES: u32 = 1024;

/// The shared-memory layout of one GEMM kernel.
#[derive(Clone, Debug)]
pub struct GemmSmem {
    /// The rings' barriers.
    pub bars: RingBarriers,
    /// Where `tcgen05.alloc` writes the TMEM base address.
    pub tmem_slot: Region,
    /// Bytes from one stage to the next.
    pub stage_bytes: u32,
    /// First stage.
    pub stages: Region,
    /// A tile within a stage.
    pub a: u32,
    /// B tile within a stage.
    pub b: u32,
    /// SFA within a stage.
    pub sfa: u32,
    /// SFB within a stage.
    pub sfb: u32,
    /// Epilogue staging.
    pub epilogue: Region,
    /// GEMM2: bytes of one of the two staging buffers.
    pub epilogue_buffer_bytes: u32,
}

fn r(name: &'static str, offset: u32, size: u32, align: u32) -> Region {
    Region { name, index: None, offset, size, align }
}

impl GemmSmem {
    /// The layout of `l`.
    pub fn plan(l: &GemmLayout) -> Self {
        let bu = &l.budget;
        let bars = RingBarriers {
            ab_full: r("ab full", OFF_FULL, 8 * bu.ab_stages, 8),
            ab_empty: r("ab empty", OFF_EMPTY, 8 * bu.ab_stages, 8),
            relay_full: Some(r("relay full", OFF_GATHER_FULL, 8 * bu.ab_stages, 8)),
            acc_full: r("acc full", OFF_ACC_FULL, 8 * bu.acc_stages, 8),
            acc_empty: r("acc empty", OFF_ACC_EMPTY, 8 * bu.acc_stages, 8),
        };
        let epi = OFF_STAGES + bu.ab_stages * bu.stage_bytes;
        GemmSmem {
            bars,
            tmem_slot: r("tmem slot", OFF_TMEM_SLOT, 4, 16),
            stage_bytes: bu.stage_bytes,
            stages: r("stages", OFF_STAGES, bu.ab_stages * bu.stage_bytes, 1024),
            a: 0,
            b: bu.a_stage_bytes,
            sfa: bu.a_stage_bytes + bu.b_stage_bytes,
            sfb: bu.a_stage_bytes + bu.b_stage_bytes + bu.sfa_stage_bytes,
            epilogue: r("epilogue", epi, bu.epilogue_bytes, 16),
            epilogue_buffer_bytes: bu.epilogue_bytes / 2,
        }
    }

    /// The address of stage `s` (its A tile).
    pub fn stage_base(&self, b: &mut KernelBuilder, smem: Reg, s: Reg) -> Reg {
        let o = b.mad_u32(s, self.stage_bytes, self.stages.offset);
        b.add_u32(smem, o)
    }
}
