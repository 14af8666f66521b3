//! The modifiers instructions share: data types, state spaces, rounding, memory-model
//! qualifiers, CTA groups and vector widths. Each prints as its PTX suffix, dot included.

use std::fmt;

/// A PTX data type (`.u32`, `.f32`, packed `.e2m1x2`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Ty {
    Pred,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S32,
    F16,
    Bf16,
    F32,
    /// Two f32 in a `.b64` register (`add/mul/fma.rn.f32x2`, sm_100).
    F32x2,
    F16x2,
    Bf16x2,
    U16x2,
    E4m3x2,
    E2m1x2,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Pred => "pred",
            Ty::B16 => "b16",
            Ty::B32 => "b32",
            Ty::B64 => "b64",
            Ty::U8 => "u8",
            Ty::U16 => "u16",
            Ty::U32 => "u32",
            Ty::U64 => "u64",
            Ty::S32 => "s32",
            Ty::F16 => "f16",
            Ty::Bf16 => "bf16",
            Ty::F32 => "f32",
            Ty::F32x2 => "f32x2",
            Ty::F16x2 => "f16x2",
            Ty::Bf16x2 => "bf16x2",
            Ty::U16x2 => "u16x2",
            Ty::E4m3x2 => "e4m3x2",
            Ty::E2m1x2 => "e2m1x2",
        }
    }
}

/// A state space, including the `::cta` / `::cluster` windows of shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// `.param` (kernel parameters).
    Param,
    /// `.global`.
    Global,
    /// `.shared` (the CTA's window, unqualified spelling).
    Shared,
    /// `.shared::cta`.
    SharedCta,
    /// `.shared::cluster` (an address that may name a peer CTA's shared memory).
    SharedCluster,
}

impl Space {
    fn name(self) -> &'static str {
        match self {
            Space::Param => "param",
            Space::Global => "global",
            Space::Shared => "shared",
            Space::SharedCta => "shared::cta",
            Space::SharedCluster => "shared::cluster",
        }
    }
}

/// Rounding of floating-point arithmetic and conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rnd {
    /// Round to nearest even (`.rn`).
    Rn,
    /// Integer rounding to nearest even (`.rni`).
    Rni,
    /// Integer rounding toward zero (`.rzi`).
    Rzi,
}

impl Rnd {
    fn name(self) -> &'static str {
        match self {
            Rnd::Rn => "rn",
            Rnd::Rni => "rni",
            Rnd::Rzi => "rzi",
        }
    }
}

/// Memory-ordering semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Sem {
    Relaxed,
    Release,
}

impl Sem {
    fn name(self) -> &'static str {
        match self {
            Sem::Relaxed => "relaxed",
            Sem::Release => "release",
        }
    }
}

/// Memory-ordering scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Scope {
    Cta,
    Cluster,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Cta => "cta",
            Scope::Cluster => "cluster",
        }
    }
}

/// The CTA group a tcgen05 operation (or a TMA load feeding one) works for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtaGroup {
    /// `.cta_group::1`: one CTA's tensor memory.
    One,
    /// `.cta_group::2`: the pair's; the even CTA issues for both.
    Two,
}

impl CtaGroup {
    /// The group of `size` CTAs (1 or 2; anything else is the pair).
    pub fn of_size(size: u32) -> Self {
        if size == 1 { CtaGroup::One } else { CtaGroup::Two }
    }
}

/// Vector width of a load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum VecWidth {
    V2,
    V4,
}

/// A comparison of `setp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Gt,
    Ge,
    /// Either operand is NaN.
    Nan,
}

impl Cmp {
    fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
            Cmp::Lt => "lt",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
            Cmp::Nan => "nan",
        }
    }
}

macro_rules! suffix_display {
    ($($t:ty => $f:expr),* $(,)?) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(".")?;
                f.write_str($f(*self))
            }
        }
    )*};
}

suffix_display! {
    Ty => Ty::name,
    Space => Space::name,
    Rnd => Rnd::name,
    Sem => Sem::name,
    Scope => Scope::name,
    Cmp => Cmp::name,
    CtaGroup => |g| match g { CtaGroup::One => "cta_group::1", CtaGroup::Two => "cta_group::2" },
    VecWidth => |v| match v { VecWidth::V2 => "v2", VecWidth::V4 => "v4" },
}
