//! Token buckets for autotuning (FlashInfer PR #3115): a tactic is tuned per bucket, and a
//! runtime token count uses its bucket's tactic. The scheme is powers of two up to 256,
//! steps of 256 up to 2048, steps of 512 up to 4096, powers of two above. Mapping rounds
//! up without a cap (PR #3216: a cap at 8192 made N = 16384 reuse a tactic tuned at half
//! its per-expert load).

use super::error::{PlanError, Result};

/// The bucket after `b` in the unbounded scheme; `None` past u64.
fn scheme_next(b: u64) -> Option<u64> {
    match b {
        0..256 => b.checked_mul(2),
        256..2048 => Some(b + 256),
        2048..4096 => Some(b + 512),
        _ => b.checked_mul(2),
    }
}

/// Smallest scheme value ≥ n (n ≥ 1); `None` when it would not fit in u64.
fn scheme_ceil(n: u64) -> Option<u64> {
    let mut b = 1;
    while b < n {
        b = scheme_next(b)?;
    }
    Some(b)
}

/// The buckets up to a tune-time maximum.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TokenBuckets {
    max_tokens: u64,
    buckets: Vec<u64>,
}

impl TokenBuckets {
    /// Every scheme value below `max_tokens`, then `max_tokens` itself.
    pub fn new(max_tokens: u64) -> Result<Self> {
        if max_tokens == 0 {
            return Err(PlanError::Zero { what: "maximum token count" });
        }
        let mut buckets = Vec::new();
        let mut b = 1;
        while b < max_tokens {
            buckets.push(b);
            match scheme_next(b) {
                Some(next) => b = next,
                None => break,
            }
        }
        buckets.push(max_tokens);
        Ok(Self { max_tokens, buckets })
    }

    /// The tune-time maximum.
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// The tuned buckets, ascending.
    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// The bucket for a runtime token count: the smallest tuned bucket ≥ `tokens`; above the
    /// maximum, the smallest value of the (unbounded) scheme ≥ `tokens`, never the maximum.
    pub fn bucket_for(&self, tokens: u64) -> Result<u64> {
        if tokens == 0 {
            return Err(PlanError::Zero { what: "token count" });
        }
        if tokens > self.max_tokens {
            return scheme_ceil(tokens).ok_or(PlanError::Overflow { what: "token bucket" });
        }
        let i = self.buckets.partition_point(|&b| b < tokens);
        // tokens ≤ max_tokens = last bucket, so i is in range.
        Ok(self.buckets.get(i).copied().unwrap_or(self.max_tokens))
    }
}
