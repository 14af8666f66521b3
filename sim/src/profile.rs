//! The per-warp dynamic profile of a launch ([`crate::LaunchConfig::profile`]): for each warp
//! index of a CTA, how many warp-instructions of each [`Category`] it issued, summed over
//! every CTA of the launch. One issue is one execution of an instruction by the group of
//! lanes of a warp that are together at it, whatever the guard says for each lane, so a
//! divergent path counts once per group that runs it.
//!
//! A consumer that knows which warp plays which role (producer, MMA, epilogue) and how many
//! K blocks a launch ran divides to get per-role counts per K block.

/// What an instruction is, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Integer and predicate arithmetic, logic, shifts, compares and selects.
    AluInt,
    /// f32 add, mul, fma, min, max, abs, neg, compares and selects.
    AluF32,
    /// `.f32x2` add, sub, mul, fma (one instruction for two lanes).
    AluF32x2,
    /// `div.rn.f32`, `rcp.rn.f32` (many hardware instructions each).
    DivF32,
    /// `ex2.approx`, `rcp.approx` (the multi-function unit).
    Mufu,
    /// `cvt`.
    Convert,
    /// `mov`, `cvta`, `mapa`.
    Move,
    /// `ld.param`.
    LoadParam,
    /// `ld.global`.
    LoadGlobal,
    /// `ld.shared`.
    LoadShared,
    /// `st.global`.
    StoreGlobal,
    /// `st.shared`.
    StoreShared,
    /// `ldmatrix`.
    LoadMatrix,
    /// `stmatrix`.
    StoreMatrix,
    /// `atom`/`red` on global memory.
    AtomicGlobal,
    /// `atom`/`red` on shared memory.
    AtomicShared,
    /// `mbarrier.init`.
    MbarrierInit,
    /// `mbarrier.arrive` (with or without expect_tx), local or remote.
    MbarrierArrive,
    /// `mbarrier.expect_tx`.
    MbarrierExpectTx,
    /// `mbarrier.try_wait` / `test_wait`; a wait that sleeps and is retried counts again.
    MbarrierWait,
    /// Fences of CTA scope.
    FenceCta,
    /// Fences of cluster scope, `fence.mbarrier_init`.
    FenceCluster,
    /// Fences of GPU scope.
    FenceGpu,
    /// Fences of system scope.
    FenceSys,
    /// `fence.proxy.async`.
    FenceProxy,
    /// `cp.async` and `cp.async.mbarrier.arrive`.
    CpAsync,
    /// Commit and wait of cp.async and bulk async-groups.
    AsyncGroup,
    /// Bulk copies global → shared (`cp.async.bulk.shared::*.global`).
    BulkLoad,
    /// TMA tile loads.
    TmaLoad,
    /// TMA tile stores.
    TmaStore,
    /// Bulk copies shared → global.
    BulkCopy,
    /// Bulk reductions shared → global.
    BulkReduce,
    /// `prefetch`, `cp.async.bulk.prefetch`, `createpolicy` (hints without effect here).
    Prefetch,
    /// `wgmma.mma_async`.
    Wgmma,
    /// `wgmma.fence`, `commit_group`, `wait_group`.
    WgmmaSync,
    /// `setmaxnreg`.
    SetMaxNReg,
    /// `tcgen05.mma`.
    Tcgen05Mma,
    /// `tcgen05.cp`.
    Tcgen05Cp,
    /// `tcgen05.ld`.
    Tcgen05Ld,
    /// `tcgen05.st`.
    Tcgen05St,
    /// `tcgen05.commit`.
    Tcgen05Commit,
    /// `tcgen05.alloc`, `dealloc`, `relinquish_alloc_permit`.
    Tcgen05Alloc,
    /// `tcgen05.fence::*` and `tcgen05.wait::*`.
    Tcgen05Sync,
    /// `bra`.
    Branch,
    /// `ret` / `exit`.
    Exit,
    /// Named barriers (`bar.sync`, `bar.arrive`).
    BarrierCta,
    /// `barrier.cluster.arrive` / `wait`.
    BarrierCluster,
    /// `bar.warp.sync`.
    BarrierWarp,
    /// `elect`, `shfl`, `vote`, `redux`.
    WarpCollective,
    /// `griddepcontrol`.
    GridDependency,
}

impl Category {
    /// Number of categories.
    pub const COUNT: usize = Category::GridDependency as usize + 1;

    /// Every category, in declaration order.
    pub const ALL: [Category; Category::COUNT] = [
        Category::AluInt,
        Category::AluF32,
        Category::AluF32x2,
        Category::DivF32,
        Category::Mufu,
        Category::Convert,
        Category::Move,
        Category::LoadParam,
        Category::LoadGlobal,
        Category::LoadShared,
        Category::StoreGlobal,
        Category::StoreShared,
        Category::LoadMatrix,
        Category::StoreMatrix,
        Category::AtomicGlobal,
        Category::AtomicShared,
        Category::MbarrierInit,
        Category::MbarrierArrive,
        Category::MbarrierExpectTx,
        Category::MbarrierWait,
        Category::FenceCta,
        Category::FenceCluster,
        Category::FenceGpu,
        Category::FenceSys,
        Category::FenceProxy,
        Category::CpAsync,
        Category::AsyncGroup,
        Category::BulkLoad,
        Category::TmaLoad,
        Category::TmaStore,
        Category::BulkCopy,
        Category::BulkReduce,
        Category::Prefetch,
        Category::Wgmma,
        Category::WgmmaSync,
        Category::SetMaxNReg,
        Category::Tcgen05Mma,
        Category::Tcgen05Cp,
        Category::Tcgen05Ld,
        Category::Tcgen05St,
        Category::Tcgen05Commit,
        Category::Tcgen05Alloc,
        Category::Tcgen05Sync,
        Category::Branch,
        Category::Exit,
        Category::BarrierCta,
        Category::BarrierCluster,
        Category::BarrierWarp,
        Category::WarpCollective,
        Category::GridDependency,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Category::AluInt => "alu.int",
            Category::AluF32 => "alu.f32",
            Category::AluF32x2 => "alu.f32x2",
            Category::DivF32 => "div.f32",
            Category::Mufu => "mufu",
            Category::Convert => "cvt",
            Category::Move => "mov",
            Category::LoadParam => "ld.param",
            Category::LoadGlobal => "ld.global",
            Category::LoadShared => "ld.shared",
            Category::StoreGlobal => "st.global",
            Category::StoreShared => "st.shared",
            Category::LoadMatrix => "ldmatrix",
            Category::StoreMatrix => "stmatrix",
            Category::AtomicGlobal => "atom.global",
            Category::AtomicShared => "atom.shared",
            Category::MbarrierInit => "mbarrier.init",
            Category::MbarrierArrive => "mbarrier.arrive",
            Category::MbarrierExpectTx => "mbarrier.expect_tx",
            Category::MbarrierWait => "mbarrier.wait",
            Category::FenceCta => "fence.cta",
            Category::FenceCluster => "fence.cluster",
            Category::FenceGpu => "fence.gpu",
            Category::FenceSys => "fence.sys",
            Category::FenceProxy => "fence.proxy",
            Category::CpAsync => "cp.async",
            Category::AsyncGroup => "async-group",
            Category::BulkLoad => "bulk.load",
            Category::TmaLoad => "tma.load",
            Category::TmaStore => "tma.store",
            Category::BulkCopy => "bulk.copy",
            Category::BulkReduce => "bulk.reduce",
            Category::Prefetch => "prefetch",
            Category::Wgmma => "wgmma",
            Category::WgmmaSync => "wgmma.sync",
            Category::SetMaxNReg => "setmaxnreg",
            Category::Tcgen05Mma => "tcgen05.mma",
            Category::Tcgen05Cp => "tcgen05.cp",
            Category::Tcgen05Ld => "tcgen05.ld",
            Category::Tcgen05St => "tcgen05.st",
            Category::Tcgen05Commit => "tcgen05.commit",
            Category::Tcgen05Alloc => "tcgen05.alloc",
            Category::Tcgen05Sync => "tcgen05.sync",
            Category::Branch => "bra",
            Category::Exit => "exit",
            Category::BarrierCta => "bar",
            Category::BarrierCluster => "barrier.cluster",
            Category::BarrierWarp => "bar.warp",
            Category::WarpCollective => "warp",
            Category::GridDependency => "griddepcontrol",
        }
    }
}

/// Counts of one warp index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarpProfile {
    counts: [u64; Category::COUNT],
}

impl Default for WarpProfile {
    fn default() -> Self {
        Self { counts: [0; Category::COUNT] }
    }
}

impl WarpProfile {
    /// Warp-instructions of category `c`.
    pub fn count(&self, c: Category) -> u64 {
        self.counts[c as usize]
    }

    /// Warp-instructions of every category.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The non-zero counts, in category order.
    pub fn nonzero(&self) -> impl Iterator<Item = (Category, u64)> + '_ {
        Category::ALL.into_iter().map(|c| (c, self.count(c))).filter(|&(_, n)| n > 0)
    }

    pub(crate) fn add(&mut self, c: Category) {
        self.counts[c as usize] += 1;
    }

    fn merge(&mut self, other: &WarpProfile) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }
}

/// The profile of one launch: one [`WarpProfile`] per warp index of a CTA.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    warps: Vec<WarpProfile>,
    ctas: u32,
}

impl Profile {
    pub(crate) fn new(warps: usize, ctas: u32) -> Self {
        Self { warps: vec![WarpProfile::default(); warps], ctas }
    }

    pub(crate) fn add(&mut self, warp: usize, c: Category) {
        if let Some(w) = self.warps.get_mut(warp) {
            w.add(c);
        }
    }

    /// Per warp index (0 .. warps per CTA), summed over the launch's CTAs.
    pub fn warps(&self) -> &[WarpProfile] {
        &self.warps
    }

    /// CTAs the counts are summed over.
    pub fn ctas(&self) -> u32 {
        self.ctas
    }

    /// The sum over `warps` (e.g. the warps of one role).
    pub fn sum(&self, warps: impl IntoIterator<Item = usize>) -> WarpProfile {
        let mut out = WarpProfile::default();
        for w in warps {
            if let Some(p) = self.warps.get(w) {
                out.merge(p);
            }
        }
        out
    }
}
