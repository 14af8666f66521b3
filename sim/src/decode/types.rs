//! Operand and modifier types of decoded instructions: what an instruction's dotted
//! modifiers and operands become once validated.

/// A source operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Src {
    /// A register slot.
    Reg(u32),
    /// `!%p`: the negation of a predicate register.
    NotPred(u32),
    /// An immediate, a symbol's address or a constant special register, as raw bits.
    Imm(u64),
    /// A special register whose value depends on the thread, CTA or launch.
    Special(Special),
}

/// Special registers that are not constants of the kernel (PTX ISA §10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    TidX,
    NtidX,
    CtaidX,
    NctaidX,
    ClusterIdX,
    NclusterIdX,
    /// `%cluster_ctarank` and `%cluster_ctaid.x` (clusters are one-dimensional here).
    ClusterRank,
    /// `%cluster_nctarank` and `%cluster_nctaid.x`.
    ClusterSize,
    LaneId,
    WarpId,
}

/// A destination register; `None` is the sink `_`.
pub(crate) type Dst = Option<u32>;

/// `[base+offset]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    pub base: Src,
    pub offset: i64,
}

/// Element types of loads, stores and moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Pred,
    B8,
    U8,
    B16,
    U16,
    F16,
    Bf16,
    B32,
    U32,
    S32,
    F32,
    B64,
    U64,
    S64,
}

impl Ty {
    pub fn from_suffix(s: &str) -> Option<Ty> {
        Some(match s {
            "pred" => Ty::Pred,
            "b8" => Ty::B8,
            "u8" => Ty::U8,
            "b16" => Ty::B16,
            "u16" => Ty::U16,
            "f16" => Ty::F16,
            "bf16" => Ty::Bf16,
            "b32" => Ty::B32,
            "u32" => Ty::U32,
            "s32" => Ty::S32,
            "f32" => Ty::F32,
            "b64" => Ty::B64,
            "u64" => Ty::U64,
            "s64" => Ty::S64,
            _ => return None,
        })
    }

    /// Bytes in memory (a predicate is not a memory type; it has one for masking only).
    pub fn bytes(self) -> usize {
        match self {
            Ty::Pred | Ty::B8 | Ty::U8 => 1,
            Ty::B16 | Ty::U16 | Ty::F16 | Ty::Bf16 => 2,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 => 4,
            Ty::B64 | Ty::U64 | Ty::S64 => 8,
        }
    }

    /// `v` cut to what a register of this type holds.
    pub fn mask(self, v: u64) -> u64 {
        match self {
            Ty::Pred => u64::from(v != 0),
            Ty::B64 | Ty::U64 | Ty::S64 => v,
            t => v & ((1u64 << (8 * t.bytes())) - 1),
        }
    }
}

/// Which shared window an address is interpreted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    /// `.shared` / `.shared::cta`: the executing CTA only.
    Cta,
    /// `.shared::cluster`: any CTA of the cluster.
    Cluster,
}

/// State spaces of ld/st/atom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared(Window),
    Param,
}

/// Integer ALU operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntOp {
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    MadLo,
    MadWide,
    Div,
    Rem,
    Min,
    Max,
    Shl,
    Shr,
    And,
    Or,
    Xor,
    Not,
    Neg,
    Abs,
    Bfi,
    /// Bit field extract (`.u32/.s32/.u64/.s64`; signedness from the type).
    Bfe,
    /// Funnel shift of `{b, a}` (`.b32`).
    Shf {
        left: bool,
        clamp: bool,
    },
    /// Byte permute of `{b, a}` (`.b32`).
    Prmt(PrmtMode),
    /// Three-input logic; the look-up table is the fourth source (an immediate).
    Lop3,
}

/// `prmt` modes (PTX ISA prmt): the generic selector form and the five fixed patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrmtMode {
    Generic,
    F4e,
    B4e,
    Rc8,
    Ecl,
    Ecr,
    Rc16,
}

/// f32 ALU operations (round-to-nearest-even where rounding applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FOp {
    Add,
    Sub,
    Mul,
    Div,
    Fma,
    Abs,
    Neg,
    /// `min{.NaN}{.abs}.f32` with two or three inputs (PTX ISA min: -0.0 < +0.0).
    Min {
        nan: bool,
        abs: bool,
        three: bool,
    },
    /// `max{.NaN}{.abs}.f32` with two or three inputs (+0.0 > -0.0).
    Max {
        nan: bool,
        abs: bool,
        three: bool,
    },
    /// `rcp.rn.f32`: 1/a, IEEE.
    Rcp,
    /// `rcp.approx{.ftz}.f32`: the model of [`crate::approx`].
    RcpApprox {
        ftz: bool,
    },
    /// `ex2.approx{.ftz}.f32`: the model of [`crate::approx`].
    Ex2Approx {
        ftz: bool,
    },
}

/// Predicate logic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PredOp {
    And,
    Or,
    Xor,
    Not,
}

/// One ALU operation with its operand width and signedness resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alu {
    /// 32-bit integer (`signed` for .s32).
    I32(IntOp, bool),
    /// 64-bit integer.
    I64(IntOp, bool),
    F32(FOp),
    /// `.f32x2` on a `.b64` register pair (lane 0 in bits 0-31): Add, Sub, Mul, Fma.
    F32x2(FOp),
    /// `mul.rn.bf16x2` (lane 0 in bits 0-15): each lane's product rounded once to bf16.
    Bf16x2Mul,
    /// `min/max.{u16x2,s16x2}` (lane 0 in bits 0-15): Min or Max per lane.
    I16x2(IntOp, bool),
    Pred(PredOp),
}

/// setp comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Unordered forms (true when an operand is NaN).
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

/// Operand class of a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpTy {
    U32,
    S32,
    U64,
    S64,
    F32,
}

/// The `cvt` forms the simulator models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cvt {
    U64FromU32,
    U16FromU32,
    U32FromU16,
    F32FromF16,
    F32FromBf16,
    Bf16FromF32,
    Bf16x2FromF32,
    E4m3x2FromF32,
    E2m1x2FromF32,
    /// `cvt.{rz,rp}{.satfinite}.ue8m0x2.f32`.
    Ue8m0x2FromF32 {
        round_up: bool,
        satfinite: bool,
    },
    F16x2FromE4m3x2,
    RniF32,
    RziS32FromF32,
}

/// Atomic and reduction operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    And,
    Or,
    Xor,
    Min { signed: bool },
    Max { signed: bool },
    Exch,
}

/// shfl.sync modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

/// vote.sync modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

/// redux.sync operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduxOp {
    Add,
    Min { signed: bool },
    Max { signed: bool },
    And,
    Or,
    Xor,
}

/// Memory-ordering scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    Cta,
    Cluster,
    Gpu,
    Sys,
}

/// Fences. Every access completes in program order here, so they only count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fence {
    /// `fence{.sc|.acq_rel}.scope` / `membar`.
    Scoped(Scope),
    /// `fence.mbarrier_init.release.cluster`.
    MbarrierInit,
    /// `fence.proxy.async{.space}`.
    ProxyAsync,
}

/// Instructions whose effect the simulator already provides: everything asynchronous
/// completes when issued, and programmatic dependent launch has one grid at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nop {
    GridDepWait,
    GridDepLaunch,
    BulkCommit,
    BulkWait,
    Tcgen05Fence,
    Tcgen05Wait,
    /// `prefetch` of data: a hint.
    Prefetch,
}

/// `.cta_group::1` or `::2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CtaGroup {
    One,
    Two,
}

impl CtaGroup {
    pub fn ctas(self) -> usize {
        match self {
            CtaGroup::One => 1,
            CtaGroup::Two => 2,
        }
    }
}

/// MMA kinds the simulator models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MmaKind {
    /// `.kind::mxf4nvf4.block_scale.block16` (= `.scale_vec::4X`).
    Mxf4Nvf4Block16,
    /// `.kind::mxf8f6f4.block_scale.block32` (= `.scale_vec::1X`): E4M3 A, padded E2M1 B.
    Mxf8f6f4Block32,
    /// `.kind::f16` with an f32 accumulator.
    F16,
}
