//! Which rank holds which experts: `G` equal contiguous windows, rank `r` holding experts
//! `[r·E/G, (r+1)·E/G)`, the local expert window a single-rank `MoeLayer` already runs.
//! Contiguous equal windows are what engines deploy (DeepSeek-V3: 256 experts over 8 ranks,
//! 32 each) and keep the owner of an expert one division.

use moegen_dsl::plan::ExpertWindow;

use super::EpError;

/// The experts of one layer split over `ranks` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpPartition {
    experts: usize,
    ranks: usize,
    top_k: usize,
}

impl EpPartition {
    /// `experts` over `ranks` ranks, `top_k` routes per token; refused when the experts do
    /// not split into equal windows, or when a window would not be a valid `ExpertWindow`.
    pub fn new(experts: usize, ranks: usize, top_k: usize) -> Result<Self, EpError> {
        if ranks == 0 {
            return Err(EpError::ZeroRanks);
        }
        if experts == 0 || !experts.is_multiple_of(ranks) {
            return Err(EpError::ExpertsNotDivisible { experts, ranks });
        }
        let p = Self { experts, ranks, top_k };
        // Every window has the same size and validity; checking the first checks all.
        p.window(0)?;
        Ok(p)
    }

    /// Experts of the layer.
    pub fn experts(&self) -> usize {
        self.experts
    }
    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }
    /// Routes per token.
    pub fn top_k(&self) -> usize {
        self.top_k
    }
    /// Experts per rank.
    pub fn local_experts(&self) -> usize {
        self.experts / self.ranks
    }

    /// Rank `rank`'s window.
    pub fn window(&self, rank: usize) -> Result<ExpertWindow, EpError> {
        if rank >= self.ranks {
            return Err(EpError::RankOutOfRange { rank, ranks: self.ranks });
        }
        let l = self.local_experts();
        Ok(ExpertWindow::new(self.experts, rank * l, l, self.top_k)?)
    }

    /// The rank holding expert `id`; `None` outside `[0, experts)`.
    pub fn owner(&self, id: i32) -> Option<usize> {
        let e = usize::try_from(id).ok().filter(|&e| e < self.experts)?;
        Some(e / self.local_experts())
    }

    /// The most routes `tokens` tokens can send to one rank: a token names distinct experts
    /// (the routing sort refuses duplicates), so at most `min(k, E/G)` of them are one rank's.
    pub fn max_routes_to_rank(&self, tokens: usize) -> usize {
        tokens * self.top_k.min(self.local_experts())
    }
}
