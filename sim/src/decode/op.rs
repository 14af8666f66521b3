//! The typed instruction set the executor runs: one enum variant per instruction family,
//! modifiers as typed fields, operands resolved to register slots, immediates, special
//! registers and label indices. Everything here was validated once, at decode time.

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
    Min,
    Max,
    MinNaN,
    MaxNaN,
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
    CpAsyncCommit,
    CpAsyncWait,
    BulkCommit,
    BulkWait,
    Tcgen05Fence,
    Tcgen05Wait,
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

/// A TMA tile load (`cp.async.bulk.tensor.Nd.shared::*.global…mbarrier::complete_tx::bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TmaLoad {
    /// `.shared::cta` destination (the executing CTA only) or `.shared::cluster`.
    pub dst_window: Window,
    pub cta_group: Option<CtaGroup>,
    pub dst: Addr,
    pub map: Src,
    pub coords: Vec<Src>,
    pub bar: Addr,
    pub multicast: Option<Src>,
}

/// `tcgen05.mma` operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mma {
    pub cta_group: CtaGroup,
    pub kind: MmaKind,
    pub d: Addr,
    pub adesc: Src,
    pub bdesc: Src,
    pub idesc: Src,
    /// Scale-factor TMEM addresses (block-scaled kind only).
    pub sfa: Addr,
    pub sfb: Addr,
    pub enable: Src,
}

/// MMA kinds the simulator models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MmaKind {
    /// `.kind::mxf4nvf4.block_scale.block16` (= `.scale_vec::4X`).
    Mxf4Nvf4Block16,
    /// `.kind::f16` with an f32 accumulator.
    F16,
}

/// A decoded operation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Exit,
    Bra {
        target: usize,
    },
    BarSync {
        id: Src,
        count: Option<Src>,
    },
    BarArrive {
        id: Src,
        count: Src,
    },
    BarWarpSync {
        mask: Src,
    },
    ClusterArrive,
    ClusterWait,
    Fence(Fence),
    Nop(Nop),

    Mov {
        ty: Ty,
        d: Dst,
        a: Src,
    },
    /// `mov.bN d, {a, b, …}`: the first part in the low bits.
    MovPack {
        d: Dst,
        parts: Vec<Src>,
        bits: u32,
    },
    /// `cvta{.to}.param|global.u64`: the simulator's addresses of these spaces are generic.
    Cvta {
        d: Dst,
        a: Src,
    },
    Mapa {
        d: Dst,
        a: Src,
        rank: Src,
    },
    Ld {
        space: Space,
        ty: Ty,
        d: Vec<Dst>,
        addr: Addr,
    },
    St {
        space: Space,
        ty: Ty,
        addr: Addr,
        v: Vec<Src>,
    },
    /// `atom` (d is Some) and `red` (d is None); 32-bit only.
    Atom {
        space: Space,
        op: AtomOp,
        d: Option<Dst>,
        addr: Addr,
        a: Src,
    },
    Alu {
        alu: Alu,
        d: Dst,
        a: [Src; 4],
    },
    Setp {
        cmp: Cmp,
        ty: CmpTy,
        d: Dst,
        a: Src,
        b: Src,
    },
    Selp {
        ty: Ty,
        d: Dst,
        a: Src,
        b: Src,
        p: Src,
    },
    Cvt {
        cvt: Cvt,
        d: Dst,
        a: Src,
        b: Option<Src>,
    },

    Elect {
        d: Dst,
        p: Dst,
        mask: Src,
    },
    Shfl {
        mode: ShflMode,
        d: Dst,
        p: Dst,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
    },
    Vote {
        mode: VoteMode,
        d: Dst,
        a: Src,
        mask: Src,
    },
    Redux {
        op: ReduxOp,
        d: Dst,
        a: Src,
        mask: Src,
    },

    MbarInit {
        addr: Addr,
        count: Src,
    },
    /// `mbarrier.arrive` (count 1 unless given) and `arrive.expect_tx` (tx).
    MbarArrive {
        window: Window,
        addr: Addr,
        count: Option<Src>,
        tx: Option<Src>,
    },
    MbarExpectTx {
        window: Window,
        addr: Addr,
        tx: Src,
    },
    MbarWait {
        test: bool,
        d: Dst,
        addr: Addr,
        parity: Src,
    },

    CpAsync {
        size: u32,
        dst: Addr,
        src: Addr,
        src_size: Option<Src>,
    },
    CpAsyncMbarArrive {
        addr: Addr,
    },
    TmaLoad(Box<TmaLoad>),
    TmaStore {
        map: Src,
        coords: Vec<Src>,
        src: Addr,
    },
    BulkStore {
        dst: Addr,
        src: Addr,
        size: Src,
    },
    BulkReduceAddBf16 {
        dst: Addr,
        src: Addr,
        size: Src,
    },

    TcAlloc {
        cta_group: CtaGroup,
        dst: Addr,
        ncols: Src,
    },
    TcDealloc {
        cta_group: CtaGroup,
        taddr: Src,
        ncols: Src,
    },
    TcRelinquish {
        cta_group: CtaGroup,
    },
    TcLd {
        d: Vec<Dst>,
        taddr: Addr,
    },
    TcSt {
        taddr: Addr,
        v: Vec<Src>,
    },
    TcCommit {
        cta_group: CtaGroup,
        bar: Addr,
        mask: Option<Src>,
    },
    TcCp {
        cta_group: CtaGroup,
        taddr: Addr,
        desc: Src,
    },
    Mma(Box<Mma>),
}

impl Op {
    /// Warp-collective instructions execute once for the lanes of a group together.
    pub fn is_collective(&self) -> bool {
        matches!(
            self,
            Op::Elect { .. }
                | Op::Shfl { .. }
                | Op::Vote { .. }
                | Op::Redux { .. }
                | Op::BarWarpSync { .. }
                | Op::TcAlloc { .. }
                | Op::TcDealloc { .. }
                | Op::TcRelinquish { .. }
                | Op::TcLd { .. }
                | Op::TcSt { .. }
        )
    }

    /// The `.cta_group` of a tcgen05 instruction that has one.
    pub fn cta_group(&self) -> Option<CtaGroup> {
        match self {
            Op::TcAlloc { cta_group, .. }
            | Op::TcDealloc { cta_group, .. }
            | Op::TcRelinquish { cta_group }
            | Op::TcCommit { cta_group, .. }
            | Op::TcCp { cta_group, .. } => Some(*cta_group),
            Op::Mma(m) => Some(m.cta_group),
            _ => None,
        }
    }
}
