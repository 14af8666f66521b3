//! Instructions as values: an opcode with typed operands, an optional guard predicate.

use std::fmt;

use super::reg::{Reg, RegClass};

/// One operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A register.
    Reg(Reg),
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
    /// A label or symbol name (kernel parameter, shared array, branch target).
    Name(String),
    /// The sink `_`.
    Sink,
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

impl Operand {
    /// `[self+offset]`.
    pub fn at(self, offset: i64) -> Operand {
        Operand::Addr(Box::new(self), offset)
    }
    /// The register, if this operand is one.
    pub fn reg(&self) -> Option<Reg> {
        match self {
            Operand::Reg(r) => Some(*r),
            _ => None,
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Reg(r) => write!(f, "{r}"),
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
            Operand::Name(n) => f.write_str(n),
            Operand::Sink => f.write_str("_"),
            Operand::TensorRef(map, coords) => {
                write!(f, "[{map}, ")?;
                write!(f, "{}", Operand::Vector(coords.clone()))?;
                f.write_str("]")
            }
        }
    }
}

/// `@p` or `@!p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The predicate register.
    pub pred: Reg,
    /// `@!p` when true.
    pub negate: bool,
}

/// One instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    /// Optional guard.
    pub guard: Option<Guard>,
    /// Full opcode with modifiers, e.g. `mbarrier.try_wait.parity.shared::cta.b64`.
    pub opcode: String,
    /// Operands in PTX order.
    pub operands: Vec<Operand>,
}

/// A line of a kernel body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// An instruction.
    Instr(Instr),
    /// A label definition.
    Label(String),
    /// A comment saying why.
    Comment(String),
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stmt::Label(l) => write!(f, "{l}:"),
            Stmt::Comment(c) => write!(f, "\t// {c}"),
            Stmt::Instr(i) => {
                f.write_str("\t")?;
                if let Some(g) = i.guard {
                    write!(f, "@{}{} ", if g.negate { "!" } else { "" }, g.pred)?;
                }
                f.write_str(&i.opcode)?;
                for (n, op) in i.operands.iter().enumerate() {
                    f.write_str(if n == 0 { " " } else { ", " })?;
                    write!(f, "{op}")?;
                }
                f.write_str(";")
            }
        }
    }
}

/// Whether `class` is what an operand position of width `bits` accepts (for checks).
pub fn class_bits(class: RegClass) -> u32 {
    match class {
        RegClass::Pred => 1,
        RegClass::B8 => 8,
        RegClass::B16 => 16,
        RegClass::B32 | RegClass::F32 => 32,
        RegClass::B64 => 64,
    }
}
