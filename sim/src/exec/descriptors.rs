//! The tcgen05 descriptors, field by field (PTX ISA "Instruction descriptor" and "Shared
//! memory descriptor"; docs/simulator.md lists every rule). A field the simulator does not
//! model must hold the one value it models; anything else is a [`SimError::Descriptor`],
//! so a wrong bit in generated code cannot pass unnoticed.

use crate::decode::Inst;
use crate::decode::op::{CtaGroup, MmaKind};
use crate::error::SimError;

/// Bits `lo..=hi` of `v`.
fn bits(v: u64, lo: u32, hi: u32) -> u64 {
    (v >> lo) & ((1u64 << (hi - lo + 1)) - 1)
}

struct Check<'a> {
    inst: &'a Inst,
    descriptor: &'static str,
    value: u64,
}

impl Check<'_> {
    /// Field `lo..=hi` must satisfy `ok`.
    fn field(
        &self,
        field: &'static str,
        lo: u32,
        hi: u32,
        expected: &'static str,
        ok: impl Fn(u64) -> bool,
    ) -> Result<u64, SimError> {
        let found = bits(self.value, lo, hi);
        if ok(found) {
            return Ok(found);
        }
        Err(SimError::Descriptor {
            line: self.inst.line,
            opcode: self.inst.opcode.clone(),
            descriptor: self.descriptor,
            value: self.value,
            field,
            found,
            expected,
        })
    }

    /// Field `lo..=hi` must be `want`.
    fn eq(
        &self,
        field: &'static str,
        lo: u32,
        hi: u32,
        want: u64,
        expected: &'static str,
    ) -> Result<(), SimError> {
        self.field(field, lo, hi, expected, |v| v == want).map(|_| ())
    }
}

/// What an instruction descriptor selects besides M (which the CTA group fixes).
pub(super) struct Shape {
    pub n: u32,
    /// kind::f16: A and B are bf16 (else f16).
    pub bf16: bool,
    /// kind::mxf8f6f4: the byte of each 32-bit TMEM scale word that holds A's (B's) scale.
    pub sfa_id: u32,
    pub sfb_id: u32,
}

/// Checks a `tcgen05.mma` instruction descriptor of `kind`.
pub(super) fn instruction(
    idesc: u32,
    kind: MmaKind,
    group: CtaGroup,
    inst: &Inst,
) -> Result<Shape, SimError> {
    let c = Check { inst, descriptor: "instruction", value: u64::from(idesc) };
    let n_ok = |n: u64| match group {
        CtaGroup::One => (1..=32).contains(&n),
        CtaGroup::Two => (2..=32).contains(&n) && n.is_multiple_of(2),
    };
    let n_expected = match group {
        CtaGroup::One => "N/8 for N in 8..=256 step 8",
        CtaGroup::Two => "N/8 for N in 16..=256 step 16",
    };
    match kind {
        MmaKind::Mxf4Nvf4Block16 => {
            c.eq("reserved bits 0-1", 0, 1, 0, "0")?;
            c.eq("sparsity (bit 2)", 2, 2, 0, "0 (dense)")?;
            c.eq("reserved bit 3", 3, 3, 0, "0")?;
            c.eq("SFB id (bits 4-5)", 4, 5, 0, "0 (block16)")?;
            c.eq("reserved bit 6", 6, 6, 0, "0")?;
            c.eq("A type (bits 7-9)", 7, 9, 1, "1 (E2M1)")?;
            c.eq("B type (bits 10-11)", 10, 11, 1, "1 (E2M1)")?;
            c.eq("reserved bit 12", 12, 12, 0, "0")?;
            c.eq("negate A (bit 13)", 13, 13, 0, "0")?;
            c.eq("negate B (bit 14)", 14, 14, 0, "0")?;
            c.eq("transpose A (bit 15)", 15, 15, 0, "0 (K-major)")?;
            c.eq("transpose B (bit 16)", 16, 16, 0, "0 (K-major)")?;
            let n = c.field("N (bits 17-22)", 17, 22, n_expected, n_ok)?;
            c.eq("scale type (bit 23)", 23, 23, 0, "0 (UE4M3)")?;
            c.eq("reserved bits 24-26", 24, 26, 0, "0")?;
            let (m, m_expected) = match group {
                CtaGroup::One => (1, "1 (M = 128)"),
                CtaGroup::Two => (2, "2 (M = 256)"),
            };
            c.eq("M (bits 27-28)", 27, 28, m, m_expected)?;
            c.eq("SFA id (bits 29-30)", 29, 30, 0, "0 (block16)")?;
            c.eq("K size (bit 31)", 31, 31, 0, "0 (K = 64)")?;
            Ok(Shape { n: 8 * n as u32, bf16: false, sfa_id: 0, sfb_id: 0 })
        }
        MmaKind::Mxf8f6f4Block32 => {
            c.eq("reserved bits 0-1", 0, 1, 0, "0")?;
            c.eq("sparsity (bit 2)", 2, 2, 0, "0 (dense)")?;
            c.eq("reserved bit 3", 3, 3, 0, "0")?;
            let sfb_id = c.field("SFB id (bits 4-5)", 4, 5, "0..=3", |_| true)?;
            c.eq("reserved bit 6", 6, 6, 0, "0")?;
            c.eq("A type (bits 7-9)", 7, 9, 0, "0 (E4M3)")?;
            c.eq("B type (bits 10-12)", 10, 12, 5, "5 (E2M1)")?;
            c.eq("negate A (bit 13)", 13, 13, 0, "0")?;
            c.eq("negate B (bit 14)", 14, 14, 0, "0")?;
            c.eq("transpose A (bit 15)", 15, 15, 0, "0 (K-major)")?;
            c.eq("transpose B (bit 16)", 16, 16, 0, "0 (K-major)")?;
            let n = c.field("N (bits 17-22)", 17, 22, n_expected, n_ok)?;
            c.eq("scale type (bit 23)", 23, 23, 1, "1 (UE8M0)")?;
            c.eq("reserved bits 24-26", 24, 26, 0, "0")?;
            let (m, m_expected) = match group {
                CtaGroup::One => (1, "1 (M = 128)"),
                CtaGroup::Two => (2, "2 (M = 256)"),
            };
            c.eq("M (bits 27-28)", 27, 28, m, m_expected)?;
            let sfa_id = c.field("SFA id (bits 29-30)", 29, 30, "0..=3", |_| true)?;
            c.eq("reserved bit 31", 31, 31, 0, "0")?;
            Ok(Shape { n: 8 * n as u32, bf16: false, sfa_id: sfa_id as u32, sfb_id: sfb_id as u32 })
        }
        MmaKind::F16 => {
            c.eq("sparsity selector (bits 0-1)", 0, 1, 0, "0")?;
            c.eq("sparsity (bit 2)", 2, 2, 0, "0 (dense)")?;
            c.eq("saturate (bit 3)", 3, 3, 0, "0")?;
            c.eq("D type (bits 4-5)", 4, 5, 1, "1 (F32)")?;
            c.eq("reserved bit 6", 6, 6, 0, "0")?;
            let a = c.field("A type (bits 7-9)", 7, 9, "0 (F16) or 1 (BF16)", |v| v <= 1)?;
            let b_expected = if a == 0 { "0 (F16, as A)" } else { "1 (BF16, as A)" };
            c.eq("B type (bits 10-12)", 10, 12, a, b_expected)?;
            c.eq("negate A (bit 13)", 13, 13, 0, "0")?;
            c.eq("negate B (bit 14)", 14, 14, 0, "0")?;
            c.eq("transpose A (bit 15)", 15, 15, 0, "0 (K-major)")?;
            c.eq("transpose B (bit 16)", 16, 16, 0, "0 (K-major)")?;
            let n = c.field("N (bits 17-22)", 17, 22, n_expected, n_ok)?;
            c.eq("reserved bit 23", 23, 23, 0, "0")?;
            let (m, m_expected) = match group {
                CtaGroup::One => (8, "8 (M = 128)"),
                CtaGroup::Two => (16, "16 (M = 256)"),
            };
            c.eq("M (bits 24-28)", 24, 28, m, m_expected)?;
            c.eq("reserved bit 29", 29, 29, 0, "0")?;
            c.eq("max shift (bits 30-31)", 30, 31, 0, "0")?;
            Ok(Shape { n: 8 * n as u32, bf16: a == 1, sfa_id: 0, sfb_id: 0 })
        }
    }
}

/// Shared-memory layouts the simulator models.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// K-major, 128-byte swizzle (MMA operands): 8-row atoms of 128-byte rows.
    Swizzle128,
    /// K-major, no swizzle, one 16-byte core-matrix column (tcgen05.cp 32x128b): rows of 16
    /// bytes, 8-row core matrices SBO apart.
    Interleave,
}

/// A decoded shared-memory descriptor.
pub(super) struct SmemDesc {
    /// Start address (bytes).
    pub start: u32,
    /// Stride byte offset: the distance of 8-row groups.
    pub sbo: u32,
}

/// Checks a shared-memory descriptor of `layout`. LBO must be 1: for the 128B-swizzled
/// K-major layout the PTX ISA says the field is unused ("assumed 1"), and for the
/// no-swizzle layout of tcgen05.cp.32x128b the source is one core matrix wide along K, so
/// the leading-dimension offset is never applied; 1 is what CUTLASS and moegen write.
pub(super) fn shared_memory(
    d: u64,
    layout: Layout,
    which: &'static str,
    inst: &Inst,
) -> Result<SmemDesc, SimError> {
    let c = Check { inst, descriptor: which, value: d };
    c.eq("reserved bits 14-15", 14, 15, 0, "0")?;
    c.eq("LBO (bits 16-29)", 16, 29, 1, "1 (unused by the modelled layouts)")?;
    c.eq("reserved bits 30-31", 30, 31, 0, "0")?;
    c.eq("version (bits 46-48)", 46, 48, 1, "0b001")?;
    c.eq("base offset (bits 49-51)", 49, 51, 0, "0")?;
    c.eq("LBO mode (bit 52)", 52, 52, 0, "0 (relative)")?;
    c.eq("reserved bits 53-60", 53, 60, 0, "0")?;
    match layout {
        Layout::Swizzle128 => c.eq("swizzle (bits 61-63)", 61, 63, 2, "2 (128B)")?,
        Layout::Interleave => c.eq("swizzle (bits 61-63)", 61, 63, 0, "0 (none)")?,
    }
    Ok(SmemDesc { start: (bits(d, 0, 13) << 4) as u32, sbo: (bits(d, 32, 45) << 4) as u32 })
}

/// A decoded sm_90 (GMMA) shared-memory matrix descriptor of a K-major operand.
pub(super) struct GmmaDesc {
    /// Start address (bytes).
    pub start: u32,
    /// Leading byte offset (bytes; the no-swizzle layout only: the distance of the two
    /// 16-byte core-matrix columns along K).
    pub lbo: u32,
    /// Stride byte offset (bytes): the distance of 8-row groups.
    pub sbo: u32,
    /// Swizzle width in bytes (128, 64, 32), or 0 for none.
    pub swizzle: u32,
}

impl GmmaDesc {
    /// Physical shared-memory offset of the 16-byte chunk `q` (0 or 1: K elements 8q..8q+8
    /// of a 16-bit type) of row `r`. Swizzled layouts have rows of `swizzle` bytes, 8-row
    /// groups SBO apart, and XOR bits 4.. of the address with bits 7.. (PTX ISA canonical
    /// layouts `Swizzle<1|2|3, 4, 3>`); without swizzle a row is 16 bytes and the second
    /// K chunk is LBO further.
    pub fn chunk(&self, r: u32, q: u32) -> u32 {
        let group = self.start + (r / 8) * self.sbo;
        if self.swizzle == 0 {
            return group + (r % 8) * 16 + q * self.lbo;
        }
        let logical = group + (r % 8) * self.swizzle + 16 * q;
        logical ^ (((logical >> 7) & (self.swizzle / 16 - 1)) << 4)
    }
}

/// Checks a `wgmma.mma_async` shared-memory descriptor (PTX ISA "Matrix Descriptor
/// Format"; the operand is K-major since imm-trans is 0). Every bit outside the fields is
/// reserved and must be 0; the base offset must be 0, so swizzled operands must start in
/// the first row of a swizzle pattern (1024/512/256-byte aligned, plus the K offset within
/// the row) and their 8-row groups must be whole patterns apart; LBO is unused by the
/// swizzled K-major layouts (the PTX ISA: "assumed 1") and must be the 1 CUTLASS writes.
pub(super) fn gmma(d: u64, which: &'static str, inst: &Inst) -> Result<GmmaDesc, SimError> {
    let c = Check { inst, descriptor: which, value: d };
    c.eq("reserved bits 14-15", 14, 15, 0, "0")?;
    c.eq("reserved bits 30-31", 30, 31, 0, "0")?;
    c.eq("reserved bits 46-48", 46, 48, 0, "0 (sm_90 descriptors have no version field)")?;
    c.eq("base offset (bits 49-51)", 49, 51, 0, "0 (operands aligned to the swizzle pattern)")?;
    c.eq("reserved bits 52-61", 52, 61, 0, "0")?;
    let swizzle = match bits(d, 62, 63) {
        0 => 0,
        1 => 128,
        2 => 64,
        _ => 32,
    };
    let start = (bits(d, 0, 13) << 4) as u32;
    let lbo = (bits(d, 16, 29) << 4) as u32;
    let sbo = (bits(d, 32, 45) << 4) as u32;
    if swizzle != 0 {
        c.eq("LBO (bits 16-29)", 16, 29, 1, "1 (unused by the swizzled K-major layouts)")?;
        let pattern = 8 * swizzle;
        let (sbo_expected, start_expected) = match swizzle {
            128 => (
                "a multiple of the 1024-byte 128B-swizzle pattern",
                "an address whose offset in its 1024-byte pattern is at most 96 (the first row)",
            ),
            64 => (
                "a multiple of the 512-byte 64B-swizzle pattern",
                "an address whose offset in its 512-byte pattern is at most 32 (the first row)",
            ),
            _ => (
                "a multiple of the 256-byte 32B-swizzle pattern",
                "an address whose offset in its 256-byte pattern is 0 (the first row)",
            ),
        };
        c.field("SBO (bits 32-45)", 32, 45, sbo_expected, |v| {
            (v << 4).is_multiple_of(u64::from(pattern))
        })?;
        // The 32 bytes of a K step must lie in the first row of the pattern.
        c.field("start address (bits 0-13)", 0, 13, start_expected, |v| {
            (v << 4) % u64::from(pattern) + 32 <= u64::from(swizzle)
        })?;
    }
    Ok(GmmaDesc { start, lbo, sbo, swizzle })
}
