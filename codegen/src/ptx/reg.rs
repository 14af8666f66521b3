//! Typed virtual registers. ptxas allocates physical registers; moegen only names them.

use std::fmt;

/// Register classes and the PTX type each is declared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegClass {
    /// `.pred`.
    Pred,
    /// `.b8` (destination of `cvt…e2m1x2`).
    B8,
    /// `.b16`.
    B16,
    /// `.b32`.
    B32,
    /// `.b64`.
    B64,
    /// `.f32`.
    F32,
}

impl RegClass {
    /// Every class, in declaration order.
    pub const ALL: [RegClass; 6] =
        [RegClass::Pred, RegClass::B8, RegClass::B16, RegClass::B32, RegClass::B64, RegClass::F32];

    /// Position in [`RegClass::ALL`] (the register-count slot).
    pub const fn slot(self) -> usize {
        match self {
            RegClass::Pred => 0,
            RegClass::B8 => 1,
            RegClass::B16 => 2,
            RegClass::B32 => 3,
            RegClass::B64 => 4,
            RegClass::F32 => 5,
        }
    }

    /// Register name prefix (without `%`).
    pub fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "p",
            RegClass::B8 => "c",
            RegClass::B16 => "h",
            RegClass::B32 => "r",
            RegClass::B64 => "rd",
            RegClass::F32 => "f",
        }
    }

    /// PTX declaration type.
    pub fn ptx_type(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B8 => ".b8",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
        }
    }
}

/// A virtual register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    /// Class.
    pub class: RegClass,
    /// Index within the class.
    pub index: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}{}", self.class.prefix(), self.index)
    }
}
