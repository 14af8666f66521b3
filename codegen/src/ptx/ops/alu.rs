//! Arithmetic, comparison, selection, moves and conversions.

use std::fmt;

use crate::ptx::types::{Cmp, Rnd, Space, Ty};

/// Integer and bitwise operations (`add.u32`, `mad.lo.u32`, `and.pred`, `bfi.b32`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum IntOp {
    Add,
    Sub,
    /// `mul.lo`: the low half of the product.
    MulLo,
    /// `mul.wide`: the full product in a register twice as wide.
    MulWide,
    /// `mad.lo`: a·b + c, low half.
    MadLo,
    Div,
    Rem,
    Min,
    /// `max` (`.u16x2`: per 16-bit half).
    Max,
    Shl,
    Shr,
    And,
    Or,
    Xor,
    /// Bit-field insert.
    Bfi,
    /// `prmt`: four bytes picked from a pair of registers by a selector (a selector nibble
    /// with bit 3 set replicates the sign bit of the byte it names).
    Prmt,
    /// `shf.r.wrap`: the low 32 bits of `{b, a} >> (c % 32)` (with a = b, a rotation).
    ShfRWrap,
}

/// Floating-point operations. Rounding is explicit on add, mul, div and fma so that ptxas
/// cannot contract a multiply and an add into an fma (the reference rounds each step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum FloatOp {
    Add(Rnd),
    Mul(Rnd),
    Div(Rnd),
    Fma(Rnd),
    /// `max`; with `nan`, a NaN input gives NaN (`max.NaN`).
    Max {
        nan: bool,
    },
    /// `min`; with `nan`, a NaN input gives NaN (`min.NaN`).
    Min {
        nan: bool,
    },
    Abs,
    Neg,
    /// `ex2.approx.ftz`: 2^x on the MUFU unit (one SASS instruction), subnormals flushed.
    Ex2ApproxFtz,
    /// `rcp.approx.ftz`: 1/x on the MUFU unit, subnormals flushed.
    RcpApproxFtz,
    /// `ex2.approx` without ftz (the MUFU sweep only).
    Ex2Approx,
    /// `rcp.approx` without ftz (the MUFU sweep only).
    RcpApprox,
}

/// `cvt{.rnd}{.satfinite}.dst.src`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cvt {
    /// Rounding, where the conversion rounds.
    pub rnd: Option<Rnd>,
    /// Saturate to the largest finite value (required by the FP8/FP4 packings).
    pub satfinite: bool,
    /// Destination type.
    pub dst: Ty,
    /// Source type.
    pub src: Ty,
}

impl Cvt {
    /// A conversion that neither rounds nor saturates (widening, narrowing integers).
    pub const fn plain(dst: Ty, src: Ty) -> Self {
        Cvt { rnd: None, satfinite: false, dst, src }
    }
    /// A rounding conversion.
    pub const fn round(rnd: Rnd, dst: Ty, src: Ty) -> Self {
        Cvt { rnd: Some(rnd), satfinite: false, dst, src }
    }
    /// A rounding, saturating conversion.
    pub const fn satfinite(rnd: Rnd, dst: Ty, src: Ty) -> Self {
        Cvt { rnd: Some(rnd), satfinite: true, dst, src }
    }
}

/// The ALU families of [`super::Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alu {
    /// Integer or bitwise operation on a type.
    Int(IntOp, Ty),
    /// Floating-point operation on a type.
    Float(FloatOp, Ty),
    /// `setp.cmp.ty`.
    Setp(Cmp, Ty),
    /// `selp.ty`.
    Selp(Ty),
    /// `mov.ty`.
    Mov(Ty),
    /// `cvt…`.
    Cvt(Cvt),
    /// `cvta.space.ty`: a state-space address to a generic one.
    Cvta(Space, Ty),
}

impl fmt::Display for IntOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IntOp::Add => "add",
            IntOp::Sub => "sub",
            IntOp::MulLo => "mul.lo",
            IntOp::MulWide => "mul.wide",
            IntOp::MadLo => "mad.lo",
            IntOp::Div => "div",
            IntOp::Rem => "rem",
            IntOp::Min => "min",
            IntOp::Max => "max",
            IntOp::Shl => "shl",
            IntOp::Shr => "shr",
            IntOp::And => "and",
            IntOp::Or => "or",
            IntOp::Xor => "xor",
            IntOp::Bfi => "bfi",
            IntOp::Prmt => "prmt",
            IntOp::ShfRWrap => "shf.r.wrap",
        })
    }
}

impl fmt::Display for FloatOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nan = |n: bool| if n { ".NaN" } else { "" };
        match self {
            FloatOp::Add(r) => write!(f, "add{r}"),
            FloatOp::Mul(r) => write!(f, "mul{r}"),
            FloatOp::Div(r) => write!(f, "div{r}"),
            FloatOp::Fma(r) => write!(f, "fma{r}"),
            FloatOp::Max { nan: n } => write!(f, "max{}", nan(*n)),
            FloatOp::Min { nan: n } => write!(f, "min{}", nan(*n)),
            FloatOp::Abs => f.write_str("abs"),
            FloatOp::Neg => f.write_str("neg"),
            FloatOp::Ex2ApproxFtz => f.write_str("ex2.approx.ftz"),
            FloatOp::RcpApproxFtz => f.write_str("rcp.approx.ftz"),
            FloatOp::Ex2Approx => f.write_str("ex2.approx"),
            FloatOp::RcpApprox => f.write_str("rcp.approx"),
        }
    }
}

impl fmt::Display for Alu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Alu::Int(op, ty) => write!(f, "{op}{ty}"),
            Alu::Float(op, ty) => write!(f, "{op}{ty}"),
            Alu::Setp(cmp, ty) => write!(f, "setp{cmp}{ty}"),
            Alu::Selp(ty) => write!(f, "selp{ty}"),
            Alu::Mov(ty) => write!(f, "mov{ty}"),
            Alu::Cvt(c) => {
                f.write_str("cvt")?;
                if let Some(r) = c.rnd {
                    write!(f, "{r}")?;
                }
                if c.satfinite {
                    f.write_str(".satfinite")?;
                }
                write!(f, "{}{}", c.dst, c.src)
            }
            Alu::Cvta(space, ty) => write!(f, "cvta{space}{ty}"),
        }
    }
}
