//! PTX as written, before decoding: the operands the parser reads and the raw instructions
//! it hands to [`crate::decode`]. Both the parser and the decoder use these types, so neither
//! needs the other's module (the parser calls the decoder, not the reverse).

/// An operand as written.
#[derive(Clone, Debug, PartialEq)]
pub enum Opnd {
    /// A declared register (slot index).
    Reg(usize),
    /// A negated predicate register (`!%p`).
    NotReg(usize),
    /// Integer immediate.
    Imm(i64),
    /// f32 immediate bits (`0fXXXXXXXX`).
    F32(u32),
    /// `[base+off]`.
    Addr(Box<Opnd>, i64),
    /// `{a, b, …}`.
    Vector(Vec<Opnd>),
    /// A symbol: parameter, shared array, label or special register.
    Name(String),
    /// `_`.
    Sink,
    /// `[map, {coords}]`.
    TensorRef(Box<Opnd>, Vec<Opnd>),
}

/// One parsed instruction before decoding.
pub(crate) struct RawInst {
    pub guard: Option<(usize, bool)>,
    pub opcode: String,
    pub operands: Vec<Opnd>,
    pub line: usize,
}
