//! `tcgen05.mma`: the block-scaled NVFP4 kind (`mxf4nvf4.block_scale.block16`),
//! `kind::f16` with an f32 accumulator and (in `mxf8f6f4.rs`) the MXFP8 × MXFP4 kind, for
//! `.cta_group::1` (M = 128) and `::2` (M = 256: each CTA of the pair holds 128 rows of A and
//! N/2 rows of B and gets its own 128 × N accumulator). Operands are K-major tiles in
//! 128B-swizzled shared memory.

use super::descriptors::{self, Layout, SmemDesc};
use super::spaces::{bad, tmem_fault};
use super::state::Cluster;
use super::tmem;
use super::{exact, mxf8f6f4, nvfp4};
use crate::decode::Inst;
use crate::decode::op::{CtaGroup, Mma, MmaKind};
use crate::error::SimError;
use crate::minifloat::{e2m1_twice, ue4m3_times_512};

/// The CTAs an operation of `group` issued by CTA `c` acts on.
pub(super) fn pair(
    cl: &Cluster<'_>,
    c: usize,
    group: CtaGroup,
    inst: &Inst,
) -> Result<std::ops::Range<usize>, SimError> {
    if group == CtaGroup::One {
        return Ok(c..c + 1);
    }
    if !c.is_multiple_of(2) {
        return Err(bad(inst, "cta_group::2 operations are issued by the even CTA of a pair"));
    }
    if c + 1 >= cl.ctas.len() {
        return Err(bad(inst, "cta_group::2 needs a CTA pair in the cluster"));
    }
    Ok(c..c + 2)
}

/// A TMEM address operand that must start at lane 0: the column.
pub(super) fn lane0_column(taddr: u64, what: &str, inst: &Inst) -> Result<u32, SimError> {
    let taddr = taddr as u32;
    if taddr >> 16 != 0 {
        return Err(bad(inst, format!("{what} TMEM address {taddr:#x} does not start at lane 0")));
    }
    Ok(taddr & 0xFFFF)
}

impl Cluster<'_> {
    /// 32 bytes of row `r` of a 128B-swizzled K-major tile in CTA `p`: this K step's slice.
    /// The swizzle permutes 16-byte chunks within a 128-byte row, so each chunk is read whole.
    pub(super) fn row32(
        &self,
        p: usize,
        d: &SmemDesc,
        r: u32,
        inst: &Inst,
        t: usize,
    ) -> Result<[u8; 32], SimError> {
        let mut out = [0u8; 32];
        for (k, chunk) in out.chunks_mut(16).enumerate() {
            let logical = u64::from(d.start + (r / 8) * d.sbo + (r % 8) * 128) + 16 * k as u64;
            let phys = (logical ^ (((logical >> 7) & 7) << 4)) as u32;
            chunk.copy_from_slice(self.read_shared(p, phys, 16, inst, t)?);
        }
        Ok(out)
    }

    pub fn mma(&mut self, c: usize, t: usize, mma: &Mma, inst: &Inst) -> Result<(), SimError> {
        let pair = pair(self, c, mma.cta_group, inst)?;
        let d_col = lane0_column(self.addr(c, t, mma.d), "accumulator", inst)?;
        let adesc =
            descriptors::shared_memory(self.val(c, t, mma.adesc), Layout::Swizzle128, "A", inst)?;
        let bdesc =
            descriptors::shared_memory(self.val(c, t, mma.bdesc), Layout::Swizzle128, "B", inst)?;
        let idesc = self.val(c, t, mma.idesc) as u32;
        let shape = descriptors::instruction(idesc, mma.kind, mma.cta_group, inst)?;
        let enable = self.val(c, t, mma.enable) != 0;
        self.mma_instructions += 1;
        match mma.kind {
            MmaKind::Mxf4Nvf4Block16 => {
                let sfa = lane0_column(self.addr(c, t, mma.sfa), "SFA", inst)?;
                let sfb = lane0_column(self.addr(c, t, mma.sfb), "SFB", inst)?;
                self.mma_fp4(pair, t, shape.n, (&adesc, &bdesc), (d_col, sfa, sfb), enable, inst)
            }
            MmaKind::Mxf8f6f4Block32 => {
                let sfa = lane0_column(self.addr(c, t, mma.sfa), "SFA", inst)?;
                let sfb = lane0_column(self.addr(c, t, mma.sfb), "SFB", inst)?;
                let o = mxf8f6f4::Operands {
                    adesc: &adesc,
                    bdesc: &bdesc,
                    d_col,
                    sfa,
                    sfb,
                    sfa_id: shape.sfa_id,
                    sfb_id: shape.sfb_id,
                };
                self.mma_mxf8f6f4(pair, t, shape.n, &o, enable, inst)
            }
            MmaKind::F16 => {
                self.mma_f16(pair, t, shape.n, shape.bf16, (&adesc, &bdesc), d_col, enable, inst)
            }
        }
    }

    /// Block-scaled: each product of E2M1 values and UE4M3 block scales is exact; the
    /// instruction's 64 products and the accumulator are summed exactly and rounded once.
    #[allow(clippy::too_many_arguments)]
    fn mma_fp4(
        &mut self,
        pair: std::ops::Range<usize>,
        t: usize,
        n: u32,
        (adesc, bdesc): (&SmemDesc, &SmemDesc),
        (d_col, sfa, sfb): (u32, u32, u32),
        enable: bool,
        inst: &Inst,
    ) -> Result<(), SimError> {
        // Decode each operand row once: 64 values as 2 · e2m1 (integers).
        let decode = |bytes: [u8; 32]| -> [i32; 64] {
            let mut v = [0i32; 64];
            for (j, b) in bytes.iter().enumerate() {
                v[2 * j] = e2m1_twice(b & 0xF);
                v[2 * j + 1] = e2m1_twice(b >> 4);
            }
            v
        };
        let nb = n / pair.len() as u32;
        let mut b_rows = Vec::with_capacity(n as usize);
        for p in pair.clone() {
            for r in 0..nb {
                b_rows.push(decode(self.row32(p, bdesc, r, inst, t)?));
            }
        }
        for p in pair {
            let sfb: Vec<[Option<i64>; 4]> = (0..n)
                .map(|j| {
                    self.ctas[p]
                        .tmem
                        .read(j % 32, sfb + j / 32)
                        .map(|w| std::array::from_fn(|kb| ue4m3_times_512((w >> (8 * kb)) as u8)))
                })
                .collect::<Result<_, _>>()
                .map_err(tmem_fault(inst))?;
            // The accumulator's columns, checked once for the direct indexing below.
            self.ctas[p].tmem.check_columns(d_col, n).map_err(tmem_fault(inst))?;
            for r in 0..128u32 {
                let a = decode(self.row32(p, adesc, r, inst, t)?);
                let sfa_word = self.ctas[p].tmem.read(r, sfa + r / 32).map_err(tmem_fault(inst))?;
                let sfa_v: [Option<i64>; 4] =
                    std::array::from_fn(|kb| ue4m3_times_512((sfa_word >> (8 * kb)) as u8));
                for (j, brow) in b_rows.iter().enumerate() {
                    // |Σ16 products| ≤ 16·12·12 and each scale ≤ 512·448: i64 is exact.
                    let mut sum: i64 = 0;
                    let mut nan = false;
                    for (kb, (x, y)) in a.chunks_exact(16).zip(brow.chunks_exact(16)).enumerate() {
                        let (Some(sa), Some(sb)) = (sfa_v[kb], sfb[j][kb]) else {
                            nan = true;
                            continue;
                        };
                        let s: i32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
                        sum += i64::from(s) * sa * sb;
                    }
                    let idx = (r * tmem::COLUMNS + d_col + j as u32) as usize;
                    let old = f32::from_bits(self.ctas[p].tmem.data[idx]);
                    let result =
                        if nan { f32::NAN } else { nvfp4::accumulate(enable.then_some(old), sum) };
                    self.ctas[p].tmem.data[idx] = result.to_bits();
                }
            }
        }
        Ok(())
    }

    /// kind::f16: K = 16 f16 or bf16 values per row (32 bytes), products exact, summed with
    /// the accumulator exactly and rounded once (the same model as the block-scaled kind).
    #[allow(clippy::too_many_arguments)]
    fn mma_f16(
        &mut self,
        pair: std::ops::Range<usize>,
        t: usize,
        n: u32,
        bf16: bool,
        (adesc, bdesc): (&SmemDesc, &SmemDesc),
        d_col: u32,
        enable: bool,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let parts = |h: u16| if bf16 { exact::bf16_parts(h) } else { exact::f16_parts(h) };
        let values = |bytes: [u8; 32]| -> Vec<Option<(i64, i32)>> {
            bytes.chunks_exact(2).map(|h| parts(u16::from_le_bytes([h[0], h[1]]))).collect()
        };
        let nb = n / pair.len() as u32;
        let mut b_rows = Vec::with_capacity(n as usize);
        for p in pair.clone() {
            for r in 0..nb {
                b_rows.push(values(self.row32(p, bdesc, r, inst, t)?));
            }
        }
        for p in pair {
            for r in 0..128u32 {
                let a = values(self.row32(p, adesc, r, inst, t)?);
                for (j, brow) in b_rows.iter().enumerate() {
                    let col = d_col + j as u32;
                    let old =
                        f32::from_bits(self.ctas[p].tmem.read(r, col).map_err(tmem_fault(inst))?);
                    let mut terms = Vec::with_capacity(17);
                    let mut nan = false;
                    for (x, y) in a.iter().zip(brow) {
                        match (x, y) {
                            (Some((ma, ea)), Some((mb, eb))) => terms.push((ma * mb, ea + eb)),
                            _ => nan = true,
                        }
                    }
                    if enable {
                        match exact::f32_parts(old) {
                            Some(t) => terms.push(t),
                            None => nan = true,
                        }
                    }
                    let result = if nan { f32::NAN } else { exact::round_sum_to_f32(&terms) };
                    self.ctas[p].tmem.write(r, col, result.to_bits()).map_err(tmem_fault(inst))?;
                }
            }
        }
        Ok(())
    }
}
