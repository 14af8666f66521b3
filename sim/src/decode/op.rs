//! The typed instruction set the executor runs: one enum variant per instruction family,
//! modifiers as typed fields ([`super::types`]), operands resolved to register slots,
//! immediates, special registers and label indices. Everything here was validated once, at
//! decode time.

pub(crate) use super::types::*;

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

/// A bulk copy global → shared (`cp.async.bulk.shared::*.global.mbarrier::complete_tx::bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BulkLoad {
    pub dst_window: Window,
    pub dst: Addr,
    pub src: Addr,
    pub size: Src,
    pub bar: Addr,
    pub multicast: Option<Src>,
}

/// The input type of `wgmma.mma_async` (A and B alike; mixed forms are not modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WgmmaIn {
    /// `.m64nNk16.f32.bf16.bf16`.
    Bf16,
    /// `.m64nNk16.f32.f16.f16`.
    F16,
    /// `.m64nNk32.f32.e4m3.e4m3`.
    E4m3,
}

/// The A operand of `wgmma.mma_async`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WgmmaA {
    /// Four registers per thread: bf16x2 / f16x2, or four e4m3 bytes.
    Regs([u32; 4]),
    /// A shared-memory descriptor.
    Desc(Src),
}

/// `wgmma.mma_async.sync.aligned.{m64nNk16.f32.{bf16,f16}|m64nNk32.f32.e4m3}` operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wgmma {
    pub n: u32,
    /// The input type (which fixes K: 16 for bf16/f16, 32 for e4m3).
    pub ty: WgmmaIn,
    /// The N/2 accumulator registers.
    pub d: Vec<u32>,
    pub a: WgmmaA,
    pub bdesc: Src,
    pub scale_d: Src,
    /// imm-scale-a / imm-scale-b = -1.
    pub neg_a: bool,
    pub neg_b: bool,
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

/// A decoded operation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Exit,
    /// `bra{.uni}`: `.uni` promises that the lanes together at it all branch or all do not.
    Bra {
        target: usize,
        uni: bool,
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
    /// `mov.bN {d0, d1, …}, a`: the first part from the low bits.
    MovUnpack {
        a: Src,
        parts: Vec<Dst>,
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
    /// `ldmatrix.m8n8.xN.b16`: one destination per matrix.
    LdMatrix {
        trans: bool,
        d: Vec<Dst>,
        addr: Addr,
    },
    /// `stmatrix.m8n8.xN.b16`: one source per matrix.
    StMatrix {
        trans: bool,
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
    CpAsyncCommit,
    /// `cp.async.wait_group n` (`wait_all`: commit, then n = 0).
    CpAsyncWait {
        n: u32,
        all: bool,
    },
    TmaLoad(Box<TmaLoad>),
    TmaStore {
        map: Src,
        coords: Vec<Src>,
        src: Addr,
    },
    BulkLoad(Box<BulkLoad>),
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
    /// `cp.async.bulk.prefetch.L2.global`: no effect beyond its operand checks.
    PrefetchBulk {
        src: Addr,
        size: Src,
    },
    /// `cp.async.bulk.prefetch.tensor`: no effect beyond its operand checks.
    PrefetchTensor {
        map: Src,
        coords: Vec<Src>,
    },
    /// `prefetch.tensormap`: the address must hold a tensor map.
    PrefetchTensorMap {
        addr: Addr,
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

    /// Warpgroup instructions: every thread of the warpgroup executes them together.
    WgFence,
    WgCommit,
    WgWait {
        n: u32,
    },
    Wgmma(Box<Wgmma>),
    SetMaxNReg {
        inc: bool,
        n: u32,
    },
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
                | Op::LdMatrix { .. }
                | Op::StMatrix { .. }
        ) || self.is_warpgroup()
    }

    /// Warpgroup-collective instructions (`.sync.aligned` over the four warps).
    pub fn is_warpgroup(&self) -> bool {
        matches!(
            self,
            Op::WgFence | Op::WgCommit | Op::WgWait { .. } | Op::Wgmma(_) | Op::SetMaxNReg { .. }
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
