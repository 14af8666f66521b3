//! Role dispatch: each warp branches to the body of the role whose warps hold it, the
//! warps and their order coming from the ABI's role table.

use crate::ptx::{Cmp, KernelBuilder, Label, Reg};

/// Consecutive warps that run one role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarpSpan {
    /// First warp.
    pub first: u32,
    /// Warps.
    pub count: u32,
}

impl WarpSpan {
    /// One warp.
    pub fn one(warp: u32) -> Self {
        WarpSpan { first: warp, count: 1 }
    }

    /// Whether `warp` is in the span, in the fewest instructions: `eq` for one warp, `lt`
    /// for a span from warp 0, both bounds otherwise.
    pub fn holds(self, b: &mut KernelBuilder, warp: Reg) -> Reg {
        match self {
            WarpSpan { first, count: 1 } => b.setp_u32(Cmp::Eq, warp, first),
            WarpSpan { first: 0, count } => b.setp_u32(Cmp::Lt, warp, count),
            WarpSpan { first, count } => {
                let lo = b.setp_u32(Cmp::Ge, warp, first);
                let hi = b.setp_u32(Cmp::Lt, warp, first + count);
                b.and_pred(lo, hi)
            }
        }
    }
}

/// Where each dispatched role's body starts.
#[derive(Debug)]
pub struct Routes<R> {
    labels: Vec<(R, Label)>,
}

impl<R: Copy + PartialEq> Routes<R> {
    /// Tests the roles in the order given, each warp branching to the first whose span
    /// holds it (labels named by `stem`), then sends the warps of no role to `none`.
    pub fn dispatch(
        b: &mut KernelBuilder,
        warp: Reg,
        roles: &[(R, &str, WarpSpan)],
        none: &Label,
    ) -> Self {
        let labels = roles
            .iter()
            .map(|&(role, stem, span)| {
                let p = span.holds(b, warp);
                let label = b.new_label(stem);
                b.bra_if(p, &label);
                (role, label)
            })
            .collect();
        b.bra(none);
        Routes { labels }
    }

    /// Places `role`'s label here, where its body follows; false (and nothing placed) for
    /// a role no warp runs.
    pub fn enter(&self, b: &mut KernelBuilder, role: R) -> bool {
        match self.labels.iter().find(|(r, _)| *r == role) {
            Some((_, label)) => {
                b.label(label);
                true
            }
            None => false,
        }
    }
}
