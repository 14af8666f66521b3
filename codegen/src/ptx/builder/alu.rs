//! Arithmetic, comparison, selection, move and conversion helpers; each allocates its
//! destination.

use super::KernelBuilder;
use crate::ptx::operand::{Operand, SReg};
use crate::ptx::ops::{Alu, Cvt, FloatOp, IntOp};
use crate::ptx::reg::{Reg, RegClass};
use crate::ptx::types::{Cmp, Rnd, Ty};

const fn int(op: IntOp, ty: Ty) -> Alu {
    Alu::Int(op, ty)
}

const fn f32op(op: FloatOp) -> Alu {
    Alu::Float(op, Ty::F32)
}

impl KernelBuilder {
    fn b32(&mut self, op: IntOp, ty: Ty, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, int(op, ty), vec![a.into(), b.into()])
    }

    /// `add.u32`.
    pub fn add_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Add, Ty::U32, a, b)
    }
    /// `sub.u32`.
    pub fn sub_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Sub, Ty::U32, a, b)
    }
    /// `mul.lo.u32`.
    pub fn mul_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::MulLo, Ty::U32, a, b)
    }
    /// `mad.lo.u32 d, a, b, c` = a·b + c.
    pub fn mad_u32(
        &mut self,
        a: impl Into<Operand>,
        b: impl Into<Operand>,
        c: impl Into<Operand>,
    ) -> Reg {
        self.op(RegClass::B32, int(IntOp::MadLo, Ty::U32), vec![a.into(), b.into(), c.into()])
    }
    /// `div.u32`.
    pub fn div_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Div, Ty::U32, a, b)
    }
    /// `rem.u32`.
    pub fn rem_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Rem, Ty::U32, a, b)
    }
    /// `min.u32`.
    pub fn min_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Min, Ty::U32, a, b)
    }
    /// `shl.b32`.
    pub fn shl_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Shl, Ty::B32, a, b)
    }
    /// `shr.u32`.
    pub fn shr_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Shr, Ty::U32, a, b)
    }
    /// `shf.r.wrap.b32 d, a, a, n`: `a` rotated right by `n` bits.
    pub fn rotr_b32(&mut self, a: Reg, n: u32) -> Reg {
        self.op(RegClass::B32, int(IntOp::ShfRWrap, Ty::B32), vec![a.into(), a.into(), n.into()])
    }
    /// `and.b32`.
    pub fn and_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::And, Ty::B32, a, b)
    }
    /// `or.b32`.
    pub fn or_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Or, Ty::B32, a, b)
    }
    /// `xor.b32`.
    pub fn xor_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.b32(IntOp::Xor, Ty::B32, a, b)
    }
    /// `bfi.b32 d, field, base, pos, len`: `base` with bits pos..pos+len replaced by `field`.
    pub fn bfi_b32(
        &mut self,
        field: impl Into<Operand>,
        base: impl Into<Operand>,
        pos: u32,
        len: u32,
    ) -> Reg {
        let args = vec![field.into(), base.into(), pos.into(), len.into()];
        self.op(RegClass::B32, int(IntOp::Bfi, Ty::B32), args)
    }
    /// `add.u32 d, d, by` in place (loop counters).
    pub fn inc_u32(&mut self, d: Reg, by: impl Into<Operand>) {
        self.emit_to(d, int(IntOp::Add, Ty::U32), vec![d.into(), by.into()]);
    }
    /// `xor.b32 d, d, by` in place (phase bits).
    pub fn xor_assign_b32(&mut self, d: Reg, by: impl Into<Operand>) {
        self.emit_to(d, int(IntOp::Xor, Ty::B32), vec![d.into(), by.into()]);
    }

    /// `add.u64`.
    pub fn add_u64(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B64, int(IntOp::Add, Ty::U64), vec![a.into(), b.into()])
    }
    /// `mul.wide.u32`.
    pub fn mul_wide_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B64, int(IntOp::MulWide, Ty::U32), vec![a.into(), b.into()])
    }
    /// `base + index·scale` as a 64-bit address.
    pub fn index_addr(&mut self, base: Reg, index: impl Into<Operand>, scale: u32) -> Reg {
        let off = self.mul_wide_u32(index, scale);
        self.add_u64(base, off)
    }

    /// `setp.cmp.ty p, a, b`.
    pub fn setp(&mut self, cmp: Cmp, ty: Ty, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::Pred, Alu::Setp(cmp, ty), vec![a.into(), b.into()])
    }
    /// `setp.cmp.u32`.
    pub fn setp_u32(&mut self, cmp: Cmp, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.setp(cmp, Ty::U32, a, b)
    }
    /// `setp.cmp.s32`.
    pub fn setp_s32(&mut self, cmp: Cmp, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.setp(cmp, Ty::S32, a, b)
    }
    /// `setp.cmp.f32`.
    pub fn setp_f32(&mut self, cmp: Cmp, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.setp(cmp, Ty::F32, a, b)
    }
    /// `and.pred` (pass `Operand::NotPred(q)` for `p ∧ ¬q`).
    pub fn and_pred(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::Pred, int(IntOp::And, Ty::Pred), vec![a.into(), b.into()])
    }
    /// `selp.b32 d, a, b, p`.
    pub fn selp_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>, p: Reg) -> Reg {
        self.op(RegClass::B32, Alu::Selp(Ty::B32), vec![a.into(), b.into(), p.into()])
    }
    /// `selp.b64 d, a, b, p` (64-bit addresses).
    pub fn selp_b64(&mut self, a: impl Into<Operand>, b: impl Into<Operand>, p: Reg) -> Reg {
        self.op(RegClass::B64, Alu::Selp(Ty::B64), vec![a.into(), b.into(), p.into()])
    }
    /// `selp.f32 d, a, b, p`.
    pub fn selp_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>, p: Reg) -> Reg {
        self.op(RegClass::F32, Alu::Selp(Ty::F32), vec![a.into(), b.into(), p.into()])
    }

    /// `mov.u32 d, src`.
    pub fn mov_u32(&mut self, src: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, Alu::Mov(Ty::U32), vec![src.into()])
    }
    /// `mov.u32 d, src` into an existing register.
    pub fn assign_u32(&mut self, d: Reg, src: impl Into<Operand>) {
        self.emit_to(d, Alu::Mov(Ty::U32), vec![src.into()]);
    }
    /// A special register read.
    pub fn sreg(&mut self, s: SReg) -> Reg {
        self.mov_u32(s)
    }
    /// `mov.b16 d, imm`.
    pub fn mov_b16(&mut self, v: u32) -> Reg {
        self.op(RegClass::B16, Alu::Mov(Ty::B16), vec![v.into()])
    }
    /// `mov.b32` into a register of `class`: a bit-for-bit reinterpretation (b32 ↔ f32) or
    /// the packing of a vector of bytes.
    pub fn mov_b32(&mut self, class: RegClass, src: impl Into<Operand>) -> Reg {
        self.op(class, Alu::Mov(Ty::B32), vec![src.into()])
    }
    /// `mov.b64 d, {lo, hi}`.
    pub fn pack_b64(&mut self, lo: Reg, hi: Reg) -> Reg {
        self.op(RegClass::B64, Alu::Mov(Ty::B64), vec![Operand::regs(&[lo, hi])])
    }
    /// `mov.f32 d, src`.
    pub fn mov_f32(&mut self, src: impl Into<Operand>) -> Reg {
        self.op(RegClass::F32, Alu::Mov(Ty::F32), vec![src.into()])
    }
    /// `mov.f32 d, src` into an existing register.
    pub fn assign_f32(&mut self, d: Reg, src: impl Into<Operand>) {
        self.emit_to(d, Alu::Mov(Ty::F32), vec![src.into()]);
    }

    /// A conversion into a fresh register of `class`.
    pub fn cvt(&mut self, class: RegClass, cvt: Cvt, args: Vec<Operand>) -> Reg {
        self.op(class, Alu::Cvt(cvt), args)
    }
    /// `cvt.u64.u32`.
    pub fn cvt_u64_u32(&mut self, a: Reg) -> Reg {
        self.cvt(RegClass::B64, Cvt::plain(Ty::U64, Ty::U32), vec![a.into()])
    }
    /// `cvt.u16.u32` (the low half).
    pub fn cvt_u16_u32(&mut self, a: Reg) -> Reg {
        self.cvt(RegClass::B16, Cvt::plain(Ty::U16, Ty::U32), vec![a.into()])
    }
    /// `cvt.u32.u16`.
    pub fn cvt_u32_u16(&mut self, a: Reg) -> Reg {
        self.cvt(RegClass::B32, Cvt::plain(Ty::U32, Ty::U16), vec![a.into()])
    }
    /// `cvt.rn.bf16x2.f32 d, hi, lo`.
    pub fn cvt_bf16x2(&mut self, hi: Reg, lo: Reg) -> Reg {
        let c = Cvt::round(Rnd::Rn, Ty::Bf16x2, Ty::F32);
        self.cvt(RegClass::B32, c, vec![hi.into(), lo.into()])
    }

    fn f(&mut self, op: FloatOp, args: Vec<Operand>) -> Reg {
        self.op(RegClass::F32, f32op(op), args)
    }
    /// `add.rn.f32`.
    pub fn add_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.f(FloatOp::Add(Rnd::Rn), vec![a.into(), b.into()])
    }
    /// `add.rn.f32 d, d, x` in place (running sums).
    pub fn accumulate_f32(&mut self, d: Reg, x: impl Into<Operand>) {
        self.emit_to(d, f32op(FloatOp::Add(Rnd::Rn)), vec![d.into(), x.into()]);
    }
    /// `mul.rn.f32`.
    pub fn mul_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.f(FloatOp::Mul(Rnd::Rn), vec![a.into(), b.into()])
    }
    /// `div.rn.f32` (IEEE division, not the approximation).
    pub fn div_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.f(FloatOp::Div(Rnd::Rn), vec![a.into(), b.into()])
    }
    /// `fma.rn.f32 d, a, b, c` = a·b + c rounded once.
    pub fn fma_f32(
        &mut self,
        a: impl Into<Operand>,
        b: impl Into<Operand>,
        c: impl Into<Operand>,
    ) -> Reg {
        self.f(FloatOp::Fma(Rnd::Rn), vec![a.into(), b.into(), c.into()])
    }
    /// `max.NaN.f32`.
    pub fn max_nan_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.f(FloatOp::Max { nan: true }, vec![a.into(), b.into()])
    }
    /// `max.f32` (a NaN input gives the other operand).
    pub fn max_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.f(FloatOp::Max { nan: false }, vec![a.into(), b.into()])
    }
    /// `min.f32` (a NaN input gives the other operand).
    pub fn min_f32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.f(FloatOp::Min { nan: false }, vec![a.into(), b.into()])
    }
    /// `abs.f32`.
    pub fn abs_f32(&mut self, a: Reg) -> Reg {
        self.f(FloatOp::Abs, vec![a.into()])
    }
    /// `neg.f32`.
    pub fn neg_f32(&mut self, a: Reg) -> Reg {
        self.f(FloatOp::Neg, vec![a.into()])
    }
    /// `ex2.approx.ftz.f32` (one MUFU.EX2).
    pub fn ex2_approx_ftz_f32(&mut self, a: Reg) -> Reg {
        self.f(FloatOp::Ex2ApproxFtz, vec![a.into()])
    }
    /// `rcp.approx.ftz.f32` (one MUFU.RCP).
    pub fn rcp_approx_ftz_f32(&mut self, a: Reg) -> Reg {
        self.f(FloatOp::RcpApproxFtz, vec![a.into()])
    }
    /// `mul.rn.f32x2` on `.b64` pairs (one FMUL2): lanes multiply independently.
    pub fn mul_f32x2(&mut self, a: Reg, b: Reg) -> Reg {
        let op = Alu::Float(FloatOp::Mul(Rnd::Rn), Ty::F32x2);
        self.op(RegClass::B64, op, vec![a.into(), b.into()])
    }
    /// `add.rn.f32x2` on `.b64` pairs (one FADD2): lanes add independently.
    pub fn add_f32x2(&mut self, a: Reg, b: Reg) -> Reg {
        let op = Alu::Float(FloatOp::Add(Rnd::Rn), Ty::F32x2);
        self.op(RegClass::B64, op, vec![a.into(), b.into()])
    }
    /// `mov.b64 {lo, hi}, v`: the two f32 halves of a pair.
    pub fn unpack_f32x2(&mut self, v: Reg) -> (Reg, Reg) {
        let (lo, hi) = (self.reg(RegClass::F32), self.reg(RegClass::F32));
        self.emit(Alu::Mov(Ty::B64), vec![Operand::regs(&[lo, hi]), v.into()]);
        (lo, hi)
    }
}
