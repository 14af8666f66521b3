//! The static persistent tile scheduler and the K loop, as one value both targets build in
//! their prologue and every role iterates.
//!
//! There is no scheduler warp: CTA (or cluster) c takes work units c, c + #CTAs (or
//! clusters), …, a unit being one routing tile × one N block (N fastest), and stops at the
//! first routing tile ≥ `num_non_exiting_tiles`, read on the device (graph-safe). Each role
//! evaluates this pure function itself; a warp broadcasting it through shared memory would
//! add barriers and nothing else.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::{Buffer, Scalar};

use crate::ptx::{Cmp, KernelBuilder, Reg, RegClass, Ty};

/// How the N dimension splits into blocks.
#[derive(Clone, Copy, Debug)]
pub enum NBlocks {
    /// Rounded up to whole `n`-wide MMA tiles, which the `cn` N ranks of a cluster split,
    /// the last group rounded up too (SM100: a rank's tile wholly past the dimension is
    /// zero-filled and stores nothing).
    RoundUp {
        /// MMA tile width.
        n: u32,
        /// N ranks per cluster.
        cn: u32,
    },
    /// `n` divides the dimension (Hopper N blocks of one granule, `sm90_n_granule`, which
    /// the applicability guard makes divide it), whole blocks only.
    Exact {
        /// Block width.
        n: u32,
    },
    /// Rounded up to whole `n`-wide blocks, the last one possibly partial (wider Hopper N
    /// blocks: their producer and epilogues predicate on the dimension).
    Ceil {
        /// Block width.
        n: u32,
    },
}

/// How a K that is not a whole number of stages is consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KTail {
    /// K is a whole number of stages (the shape guard makes it so).
    None,
    /// The last stage is partial and its operands are zero-padded to a whole stage in
    /// memory (Hopper A8): every role runs it as a whole one.
    Padded,
    /// The last stage is partial and only its first `rem` elements exist (SM100: TMA and
    /// cp.async zero-fill the rest): the roles that must know run it apart
    /// ([`TileScheduler::k_loop_split`]).
    Split,
}

/// What the prologue reads the problem size by.
#[derive(Clone, Copy, Debug)]
pub struct ProblemShape {
    /// Which GEMM (K and N are hidden and 2·intermediate for GEMM1, the other way round
    /// for GEMM2).
    pub kind: GemmKind,
    /// GEMM1 whose activation is not gated (ReLU²): W1 has I rows, so N is I, not 2I.
    pub ungated: bool,
    /// K elements per stage (a power of two).
    pub k_stage: u32,
    /// How a K that is not a multiple of `k_stage` ends.
    pub k_tail: KTail,
    /// How N splits.
    pub n_blocks: NBlocks,
}

/// Where this CTA sits in a cluster that shares work units (SM100).
#[derive(Clone, Copy, Debug)]
pub struct ClusterPlace {
    /// N ranks per cluster.
    pub cn: u32,
    /// This CTA's N rank.
    pub n_rank: Reg,
    /// This CTA's M rank.
    pub m_rank: Reg,
    /// Rows of a routing tile each M rank owns.
    pub cta_rows: u32,
}

/// Which per-tile tables a role reads (each a global load per work unit); a role that does
/// not read one sees 0 there.
#[derive(Clone, Copy, Debug)]
pub struct Needs {
    /// `tile_idx_to_expert_idx`.
    pub expert: bool,
    /// `tile_idx_to_mn_limit`.
    pub limit: bool,
}

impl Needs {
    /// Neither table.
    pub const NONE: Needs = Needs { expert: false, limit: false };
    /// The expert only.
    pub const EXPERT: Needs = Needs { expert: true, limit: false };
    /// The row limit only.
    pub const LIMIT: Needs = Needs { expert: false, limit: true };
    /// Both.
    pub const ALL: Needs = Needs { expert: true, limit: true };
}

/// One work unit inside the schedule loop.
#[derive(Clone, Copy, Debug)]
pub struct Unit {
    /// The unit's index in the schedule (this CTA's next is `u + stride`).
    pub u: Reg,
    /// N block of this CTA.
    pub n: Reg,
    /// Expert of the routing tile (0 unless needed).
    pub expert: Reg,
    /// Permuted rows below this bound are valid (0 unless needed).
    pub mn_limit: Reg,
    /// First permuted row of this CTA.
    pub row0: Reg,
}

/// The schedule of one kernel: its work units, the stride between a CTA's units, and the
/// K stages of each.
#[derive(Clone, Copy, Debug)]
pub struct TileScheduler {
    /// This CTA's (cluster's) first unit.
    pub first: Reg,
    /// Units between this CTA's (cluster's) consecutive units.
    pub stride: Reg,
    /// K stages per unit (a partial last one included).
    pub k_tiles: Reg,
    /// With [`KTail::Split`]: the whole K stages and the K elements of the partial stage
    /// after them (0 when there is none).
    pub k_split: Option<(Reg, Reg)>,
    /// N blocks per routing tile.
    pub units_n: Reg,
    /// Units of all routing tiles the buffers hold.
    pub total_units: Reg,
    /// Routing tiles that hold rows.
    pub live_tiles: Reg,
    /// `tile_idx_to_expert_idx`.
    pub tile_expert: Reg,
    /// `tile_idx_to_mn_limit`.
    pub tile_limit: Reg,
    /// Rows of a routing tile.
    pub tile: u32,
    /// This CTA's place in its cluster, if the cluster shares units.
    pub cluster: Option<ClusterPlace>,
    /// Split K (Hopper): the stages `[begin, end)` of every unit this CTA accumulates
    /// ([`Self::split_k`]); `None`: all `k_tiles`.
    pub k_range: Option<(Reg, Reg)>,
}

impl TileScheduler {
    /// The PDL hand-off, then the problem size and the routing tables: they are the
    /// previous kernel's output, so every read follows the wait.
    pub fn load(
        b: &mut KernelBuilder,
        shape: &ProblemShape,
        first: Reg,
        stride: Reg,
        tile: u32,
        cluster: Option<ClusterPlace>,
    ) -> Self {
        b.pdl_handoff();
        let k_dim = b.ld_scalar(match shape.kind {
            GemmKind::Gemm1 => Scalar::Hidden,
            GemmKind::Gemm2 => Scalar::Intermediate,
        });
        let log_stage = shape.k_stage.trailing_zeros();
        let k_split = (shape.k_tail == KTail::Split).then(|| {
            let full = b.shr_u32(k_dim, log_stage);
            let rem = b.and_b32(k_dim, shape.k_stage - 1);
            (full, rem)
        });
        let k_tiles = match shape.k_tail {
            KTail::None => b.shr_u32(k_dim, log_stage),
            KTail::Padded | KTail::Split => {
                let k_pad = b.add_u32(k_dim, shape.k_stage - 1);
                b.shr_u32(k_pad, log_stage)
            }
        };
        let n_dim = match shape.kind {
            GemmKind::Gemm1 if shape.ungated => b.ld_scalar(Scalar::Intermediate),
            GemmKind::Gemm1 => {
                let i = b.ld_scalar(Scalar::Intermediate);
                b.shl_b32(i, 1u32)
            }
            GemmKind::Gemm2 => b.ld_scalar(Scalar::Hidden),
        };
        let units_n = match shape.n_blocks {
            NBlocks::RoundUp { n, cn } => {
                let n_pad = b.add_u32(n_dim, n - 1);
                let n_tiles = b.div_u32(n_pad, n);
                if cn == 1 {
                    n_tiles
                } else {
                    let groups = b.add_u32(n_tiles, cn - 1);
                    b.div_u32(groups, cn)
                }
            }
            NBlocks::Exact { n } => b.div_u32(n_dim, n),
            NBlocks::Ceil { n } => {
                let n_pad = b.add_u32(n_dim, n - 1);
                b.div_u32(n_pad, n)
            }
        };
        let max_tiles = b.ld_scalar(Scalar::MaxTiles);
        let total_units = b.mul_u32(max_tiles, units_n);
        let live_ptr = b.ld_buffer(Buffer::NumNonExitingTiles);
        let live_raw = b.ld_global(Ty::U32, RegClass::B32, live_ptr);
        let live = b.min_u32(live_raw, max_tiles);
        // The live-tile mask: a kernel launched beside a sibling of another width does its
        // units only at the live-tile counts its bit is set for (the sibling has the others);
        // a kernel left out does no unit and goes straight to its teardown.
        let lo = b.ld_scalar(Scalar::LiveTileMaskLo);
        let hi = b.ld_scalar(Scalar::LiveTileMaskHi);
        let bit = b.min_u32(live, 63u32);
        let high = b.setp_u32(Cmp::Ge, bit, 32u32);
        let word = b.selp_u32(hi, lo, high);
        let shift = b.and_b32(bit, 31u32);
        let shifted = b.shr_u32(word, shift);
        let flag = b.and_b32(shifted, 1u32);
        let run = b.setp_u32(Cmp::Ne, flag, 0u32);
        let live_tiles = b.selp_u32(live, 0u32, run);
        let tile_expert = b.ld_buffer(Buffer::TileIdxToExpertIdx);
        let tile_limit = b.ld_buffer(Buffer::TileIdxToMnLimit);
        TileScheduler {
            first,
            stride,
            k_tiles,
            k_split,
            units_n,
            total_units,
            live_tiles,
            tile_expert,
            tile_limit,
            tile,
            cluster,
            k_range: None,
        }
    }

    /// This schedule for rank `rank` of a cluster of `split` CTAs that split every unit's K:
    /// its K loops run the rank's stages (`moegen_dsl::sm90_split_k_range`, computed the
    /// same way here). The units stay whole-cluster: every rank walks the same ones.
    pub fn split_k(self, b: &mut KernelBuilder, rank: Reg, split: u32) -> Self {
        let lo = b.mul_u32(rank, self.k_tiles);
        let begin = b.div_u32(lo, split);
        let hi = b.add_u32(lo, self.k_tiles);
        let end = b.div_u32(hi, split);
        Self { k_range: Some((begin, end)), ..self }
    }

    /// Whether stage `kk` is not the first this CTA accumulates for a unit (its wgmmas add
    /// to the accumulators rather than start them).
    pub fn accumulates(&self, b: &mut KernelBuilder, kk: Reg) -> Reg {
        match self.k_range {
            Some((begin, _)) => b.setp_u32(Cmp::Ne, kk, begin),
            None => b.setp_u32(Cmp::Ne, kk, 0u32),
        }
    }

    /// Emits the schedule loop around `body`, loading the tables `needs` names.
    pub fn units(
        &self,
        b: &mut KernelBuilder,
        needs: Needs,
        body: &mut dyn FnMut(&mut KernelBuilder, &Unit),
    ) {
        let top = b.new_label("unit");
        let done = b.new_label("units_done");
        let zero = (!needs.expert || !needs.limit).then(|| b.mov_u32(0u32));
        let u = b.mov_u32(self.first);
        b.label(&top);
        let end = b.setp_u32(Cmp::Ge, u, self.total_units);
        b.bra_if(end, &done);
        let m = b.div_u32(u, self.units_n);
        let dead = b.setp_u32(Cmp::Ge, m, self.live_tiles);
        b.bra_if(dead, &done);
        let nt = b.rem_u32(u, self.units_n);
        let n = match self.cluster {
            Some(p) => b.mad_u32(nt, p.cn, p.n_rank),
            None => nt,
        };
        let table = |b: &mut KernelBuilder, needed: bool, base: Reg| match (needed, zero) {
            (false, Some(z)) => z,
            _ => {
                let a = b.index_addr(base, m, 4);
                b.ld_global(Ty::U32, RegClass::B32, a)
            }
        };
        let expert = table(b, needs.expert, self.tile_expert);
        let mn_limit = table(b, needs.limit, self.tile_limit);
        let rows = b.mul_u32(m, self.tile);
        let row0 = match self.cluster {
            Some(p) => b.mad_u32(p.m_rank, p.cta_rows, rows),
            None => rows,
        };
        body(b, &Unit { u, n, expert, mn_limit, row0 });
        b.inc_u32(u, self.stride);
        b.bra(&top);
        b.label(&done);
    }

    /// A runtime K-stage loop `for kk in 0..k_tiles` (with a split, over this CTA's range).
    pub fn k_loop(&self, b: &mut KernelBuilder, body: &mut dyn FnMut(&mut KernelBuilder, Reg)) {
        match self.k_range {
            Some((begin, end)) => self.k_loop_from(b, Some(begin), end, body),
            None => self.k_loop_to(b, self.k_tiles, body),
        }
    }

    /// `for kk in 0..bound`.
    fn k_loop_to(
        &self,
        b: &mut KernelBuilder,
        bound: Reg,
        body: &mut dyn FnMut(&mut KernelBuilder, Reg),
    ) {
        self.k_loop_from(b, None, bound, body);
    }

    /// `for kk in begin..bound` (`None`: from 0).
    fn k_loop_from(
        &self,
        b: &mut KernelBuilder,
        begin: Option<Reg>,
        bound: Reg,
        body: &mut dyn FnMut(&mut KernelBuilder, Reg),
    ) {
        let top = b.new_label("k");
        let done = b.new_label("k_done");
        let kk = match begin {
            Some(r) => b.mov_u32(r),
            None => b.mov_u32(0u32),
        };
        b.label(&top);
        let end = b.setp_u32(Cmp::Ge, kk, bound);
        b.bra_if(end, &done);
        body(b, kk);
        b.inc_u32(kk, 1u32);
        b.bra(&top);
        b.label(&done);
    }

    /// The K stages of [`Self::k_loop`], the whole ones in a loop whose body gets `None`, then
    /// (with [`KTail::Split`], when K has one) the partial stage, emitted apart, whose body
    /// gets `Some(rem)`, its K elements: the whole stages' loop carries no tail test.
    pub fn k_loop_split(
        &self,
        b: &mut KernelBuilder,
        body: &mut dyn FnMut(&mut KernelBuilder, Reg, Option<Reg>),
    ) {
        let Some((full, rem)) = self.k_split else {
            return self.k_loop(b, &mut |b, kk| body(b, kk, None));
        };
        self.k_loop_to(b, full, &mut |b, kk| body(b, kk, None));
        let done = b.new_label("k_tail_done");
        let whole = b.setp_u32(Cmp::Eq, rem, 0u32);
        b.bra_if(whole, &done);
        body(b, full, Some(rem));
        b.label(&done);
    }
}
