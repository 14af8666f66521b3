//! Operands: registers, immediates, addresses, vectors, labels, symbols, special registers,
//! the sink and predicate outputs.

use std::fmt;

use super::reg::Reg;

/// Name of the dynamic shared-memory array.
pub const SMEM: &str = "moegen_smem";

/// A special (read-only, hardware-provided) register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SReg {
    /// `%tid.x`.
    TidX,
    /// `%ctaid.x`.
    CtaidX,
    /// `%nctaid.x`.
    NctaidX,
    /// `%cluster_ctarank`: this CTA's rank in its cluster.
    ClusterCtarank,
    /// `%clusterid.x`.
    ClusteridX,
    /// `%nclusterid.x`.
    NclusteridX,
}

impl fmt::Display for SReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SReg::TidX => "%tid.x",
            SReg::CtaidX => "%ctaid.x",
            SReg::NctaidX => "%nctaid.x",
            SReg::ClusterCtarank => "%cluster_ctarank",
            SReg::ClusteridX => "%clusterid.x",
            SReg::NclusteridX => "%nclusterid.x",
        })
    }
}

/// A branch target. Made by [`super::KernelBuilder::new_label`] (unique) or
/// [`Label::named`] (for a kernel's one-of-a-kind join point).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label(pub(crate) String);

impl Label {
    /// `L_<stem>`, for a label the kernel places exactly once.
    pub fn named(stem: &str) -> Self {
        Label(format!("L_{stem}"))
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A register.
    Reg(Reg),
    /// A negated predicate source, `!p`.
    NotPred(Reg),
    /// An integer immediate, printed in decimal.
    Imm(i64),
    /// A 32-bit bit pattern, printed as hex (descriptors, masks).
    Hex(u32),
    /// An f32 immediate, printed as `0fXXXXXXXX` so the bits are exact.
    F32(f32),
    /// A memory operand `[base+offset]`.
    Addr(Box<Operand>, i64),
    /// A vector `{a, b, …}`.
    Vector(Vec<Operand>),
    /// A branch target.
    Label(Label),
    /// A kernel parameter (its name comes from the ABI).
    Param(&'static str),
    /// The dynamic shared-memory array.
    SharedArray,
    /// A special register.
    Special(SReg),
    /// The sink `_`: a destination whose value is discarded.
    Sink,
    /// A value destination paired with a predicate destination, `d|p` (`_|p` without d).
    PredOut {
        /// The value, or the sink.
        value: Option<Reg>,
        /// The predicate.
        pred: Reg,
    },
    /// A tensor-map reference with coordinates: `[tmap, {c0, c1, …}]`.
    TensorRef(Box<Operand>, Vec<Operand>),
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Self {
        Operand::Reg(r)
    }
}
impl From<i64> for Operand {
    fn from(v: i64) -> Self {
        Operand::Imm(v)
    }
}
impl From<u32> for Operand {
    fn from(v: u32) -> Self {
        Operand::Imm(i64::from(v))
    }
}
impl From<i32> for Operand {
    fn from(v: i32) -> Self {
        Operand::Imm(i64::from(v))
    }
}
impl From<f32> for Operand {
    fn from(v: f32) -> Self {
        Operand::F32(v)
    }
}
impl From<SReg> for Operand {
    fn from(v: SReg) -> Self {
        Operand::Special(v)
    }
}
impl From<&Label> for Operand {
    fn from(v: &Label) -> Self {
        Operand::Label(v.clone())
    }
}

impl Operand {
    /// `[self+offset]`.
    pub fn at(self, offset: i64) -> Operand {
        Operand::Addr(Box::new(self), offset)
    }
    /// `[reg]`.
    pub fn addr(reg: Reg) -> Operand {
        Operand::Reg(reg).at(0)
    }
    /// `{r0, r1, …}`.
    pub fn regs(regs: &[Reg]) -> Operand {
        Operand::Vector(regs.iter().map(|&r| r.into()).collect())
    }
    /// `[tmap, {coords…}]`.
    pub fn tensor(map: Reg, coords: Vec<Operand>) -> Operand {
        Operand::TensorRef(Box::new(map.into()), coords)
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Reg(r) => write!(f, "{r}"),
            Operand::NotPred(r) => write!(f, "!{r}"),
            Operand::Imm(v) => write!(f, "{v}"),
            Operand::Hex(v) => write!(f, "{v:#010x}"),
            Operand::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
            Operand::Addr(base, 0) => write!(f, "[{base}]"),
            Operand::Addr(base, off) if *off < 0 => write!(f, "[{base}{off}]"),
            Operand::Addr(base, off) => write!(f, "[{base}+{off}]"),
            Operand::Vector(v) => {
                f.write_str("{")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("}")
            }
            Operand::Label(l) => write!(f, "{l}"),
            Operand::Param(name) => f.write_str(name),
            Operand::SharedArray => f.write_str(SMEM),
            Operand::Special(s) => write!(f, "{s}"),
            Operand::Sink => f.write_str("_"),
            Operand::PredOut { value: Some(v), pred } => write!(f, "{v}|{pred}"),
            Operand::PredOut { value: None, pred } => write!(f, "_|{pred}"),
            Operand::TensorRef(map, coords) => {
                write!(f, "[{map}, ")?;
                f.write_str("{")?;
                for (i, x) in coords.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("}]")
            }
        }
    }
}
