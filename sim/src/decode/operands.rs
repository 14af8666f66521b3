//! Operands as written ([`Opnd`]) to typed operands: registers stay slots, immediates and
//! the addresses of parameters and the dynamic shared array become constants, special
//! registers become [`Special`], labels become instruction indices.

use super::Ctx;
use super::op::{Addr, Dst, Special, Src};
use crate::error::SimError;
use crate::syntax::Opnd;

/// Tag bit of an address in the parameter space (the simulator's generic parameter window).
pub(crate) const PARAM_SPACE: u64 = 1 << 62;

fn special(name: &str) -> Option<Src> {
    use Special::*;
    Some(match name {
        "%tid.x" => Src::Special(TidX),
        "%ntid.x" => Src::Special(NtidX),
        "%ctaid.x" => Src::Special(CtaidX),
        "%nctaid.x" => Src::Special(NctaidX),
        "%clusterid.x" => Src::Special(ClusterIdX),
        "%nclusterid.x" => Src::Special(NclusterIdX),
        "%cluster_ctarank" | "%cluster_ctaid.x" => Src::Special(ClusterRank),
        "%cluster_nctarank" | "%cluster_nctaid.x" => Src::Special(ClusterSize),
        "%laneid" => Src::Special(LaneId),
        "%warpid" => Src::Special(WarpId),
        // Launches are one-dimensional.
        "%tid.y" | "%tid.z" | "%ctaid.y" | "%ctaid.z" | "%clusterid.y" | "%clusterid.z"
        | "%cluster_ctaid.y" | "%cluster_ctaid.z" => Src::Imm(0),
        "%ntid.y" | "%ntid.z" | "%nctaid.y" | "%nctaid.z" | "%nclusterid.y" | "%nclusterid.z"
        | "%cluster_nctaid.y" | "%cluster_nctaid.z" => Src::Imm(1),
        _ => return None,
    })
}

impl Ctx<'_> {
    /// A value operand.
    pub fn src(&self, o: &Opnd) -> Result<Src, SimError> {
        Ok(match o {
            Opnd::Reg(r) => Src::Reg(*r as u32),
            Opnd::NotReg(r) => Src::NotPred(*r as u32),
            Opnd::Imm(v) => Src::Imm(*v as u64),
            Opnd::F32(bits) => Src::Imm(u64::from(*bits)),
            Opnd::Name(n) => {
                if let Some(s) = special(n) {
                    s
                } else if self.info.dynamic_shared == Some(n.as_str()) {
                    Src::Imm(0)
                } else if let Some((_, off)) = self.info.params.iter().find(|(p, _)| p == n) {
                    Src::Imm(PARAM_SPACE | *off as u64)
                } else {
                    return Err(self.bad(format!("unknown symbol {n}")));
                }
            }
            _ => return Err(self.bad(format!("operand {o:?} is not a value"))),
        })
    }

    /// A value operand that must be a register or an immediate (no negation).
    pub fn src_plain(&self, o: &Opnd) -> Result<Src, SimError> {
        match self.src(o)? {
            Src::NotPred(_) => Err(self.bad("a negated predicate is not allowed here")),
            s => Ok(s),
        }
    }

    /// An immediate known at decode time.
    pub fn imm(&self, o: &Opnd) -> Result<u64, SimError> {
        match o {
            Opnd::Imm(v) => Ok(*v as u64),
            _ => Err(self.bad(format!("operand {o:?} must be an immediate"))),
        }
    }

    /// A destination register or `_`.
    pub fn dst(&self, o: &Opnd) -> Result<Dst, SimError> {
        match o {
            Opnd::Reg(r) => Ok(Some(*r as u32)),
            Opnd::Sink => Ok(None),
            _ => Err(self.bad(format!("destination {o:?} must be a register"))),
        }
    }

    /// A destination register (no sink).
    pub fn dst_reg(&self, o: &Opnd) -> Result<Dst, SimError> {
        match o {
            Opnd::Reg(r) => Ok(Some(*r as u32)),
            _ => Err(self.bad(format!("destination {o:?} must be a register"))),
        }
    }

    /// The sink `_` (the PTX forms that return nothing usable here).
    pub fn sink(&self, o: &Opnd) -> Result<(), SimError> {
        match o {
            Opnd::Sink => Ok(()),
            _ => Err(self.bad(format!("operand {o:?} must be the sink `_`"))),
        }
    }

    /// `[base+offset]`.
    pub fn addr(&self, o: &Opnd) -> Result<Addr, SimError> {
        match o {
            Opnd::Addr(base, offset) => Ok(Addr { base: self.src_plain(base)?, offset: *offset }),
            _ => Err(self.bad(format!("operand {o:?} must be an address [base+offset]"))),
        }
    }

    /// `{d0, d1, …}` of exactly `n` destinations (`n` = 0: any length).
    pub fn dst_vector(&self, o: &Opnd, n: usize) -> Result<Vec<Dst>, SimError> {
        let Opnd::Vector(items) = o else {
            return Err(self.bad(format!("operand {o:?} must be a vector {{…}}")));
        };
        if n != 0 && items.len() != n {
            return Err(self.bad(format!("vector of {} registers, {n} expected", items.len())));
        }
        items.iter().map(|i| self.dst(i)).collect()
    }

    /// `{a0, a1, …}` of exactly `n` sources (`n` = 0: any length).
    pub fn src_vector(&self, o: &Opnd, n: usize) -> Result<Vec<Src>, SimError> {
        let Opnd::Vector(items) = o else {
            return Err(self.bad(format!("operand {o:?} must be a vector {{…}}")));
        };
        if n != 0 && items.len() != n {
            return Err(self.bad(format!("vector of {} values, {n} expected", items.len())));
        }
        items.iter().map(|i| self.src_plain(i)).collect()
    }

    /// A branch target.
    pub fn label(&self, o: &Opnd) -> Result<usize, SimError> {
        match o {
            Opnd::Name(l) => self
                .info
                .labels
                .get(l)
                .copied()
                .ok_or_else(|| self.bad(format!("unknown label {l}"))),
            _ => Err(self.bad(format!("branch target {o:?} must be a label"))),
        }
    }
}
