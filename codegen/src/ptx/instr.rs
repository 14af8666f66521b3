//! Instructions (a typed opcode, operands, an optional guard) and body lines, and the one
//! printer that renders them.

use std::fmt;

use super::operand::{Label, Operand};
use super::ops::Op;
use super::reg::Reg;

/// `@p` or `@!p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The predicate register.
    pub pred: Reg,
    /// `@!p` when true.
    pub negate: bool,
}

impl Guard {
    /// Executes when `pred` holds.
    pub fn when(pred: Reg) -> Self {
        Guard { pred, negate: false }
    }
    /// Executes when `pred` does not hold.
    pub fn unless(pred: Reg) -> Self {
        Guard { pred, negate: true }
    }
}

/// One instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    /// Optional guard.
    pub guard: Option<Guard>,
    /// Opcode with its modifiers.
    pub op: Op,
    /// Operands in PTX order.
    pub operands: Vec<Operand>,
}

/// A line of a kernel body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// An instruction.
    Instr(Instr),
    /// A label definition.
    Label(Label),
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
                write!(f, "{}", i.op)?;
                for (n, op) in i.operands.iter().enumerate() {
                    f.write_str(if n == 0 { " " } else { ", " })?;
                    write!(f, "{op}")?;
                }
                f.write_str(";")
            }
        }
    }
}
