//! How many routing tiles an expert's routes fill when tokens choose their experts uniformly
//! at random: the dispatch model's view of the autotuner's routing (`tune::uniform_routing`).
//!
//! Each token takes `top_k` distinct experts of `experts`, so a given expert is among a
//! token's choices with probability p = top_k / experts, independently across tokens: its
//! route count is Binomial(tokens, p). An expert whose count is just above a multiple of the
//! tile size dequantizes its weights once more (from L2) for a nearly empty tile, which a
//! model of evenly spread routes (every expert at the mean) never sees.

/// Expected routing tiles of `tile` rows per expert, and the probability that an expert
/// gets no route, for `tokens` tokens that each choose `top_k` of `experts` distinct experts
/// uniformly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RouteCounts {
    /// E[⌈X / tile⌉], X ~ Binomial(tokens, top_k / experts).
    pub tiles_per_expert: f64,
    /// P(X = 0).
    pub idle: f64,
}

/// Terms below this fraction of the mode's are dropped: past about 8.3 standard deviations
/// either side, far below what changes a ranking.
const NEGLIGIBLE: f64 = 1e-15;

impl RouteCounts {
    /// The expectations for one expert; `tile` 0 is taken as 1.
    pub(crate) fn uniform(tokens: u64, top_k: u64, experts: u64, tile: u64) -> Self {
        let tile = tile.max(1);
        let p = if experts == 0 { 0.0 } else { (top_k as f64 / experts as f64).min(1.0) };
        if tokens == 0 || p <= 0.0 {
            return Self { tiles_per_expert: 0.0, idle: 1.0 };
        }
        if p >= 1.0 {
            return Self { tiles_per_expert: tokens.div_ceil(tile) as f64, idle: 0.0 };
        }
        // The probabilities relative to the mode's, walking out from the mode with the ratio
        // P(x + 1) / P(x) = (n − x) / (x + 1) · p / q: no factorials, no overflow, and only
        // the O(√n) terms that matter.
        let n = tokens as f64;
        let odds = p / (1.0 - p);
        let mode = ((n + 1.0) * p).floor().min(n) as u64;
        let tiles = |x: u64| x.div_ceil(tile) as f64;
        let (mut mass, mut tiles_sum, mut idle) = (1.0, tiles(mode), 0.0);
        if mode == 0 {
            idle = 1.0;
        }
        let (mut w, mut x) = (1.0f64, mode);
        while x < tokens {
            w *= (n - x as f64) / (x as f64 + 1.0) * odds;
            x += 1;
            if w < NEGLIGIBLE {
                break;
            }
            mass += w;
            tiles_sum += w * tiles(x);
        }
        let (mut w, mut x) = (1.0f64, mode);
        while x > 0 {
            w *= x as f64 / (n - x as f64 + 1.0) / odds;
            x -= 1;
            if w < NEGLIGIBLE {
                break;
            }
            mass += w;
            tiles_sum += w * tiles(x);
            if x == 0 {
                idle = w;
            }
        }
        Self { tiles_per_expert: tiles_sum / mass, idle: idle / mass }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same expectations by brute force over every count, from the pmf in closed form
    /// (log-factorials summed directly).
    fn direct(tokens: u64, top_k: u64, experts: u64, tile: u64) -> (f64, f64) {
        let (n, p) = (tokens as f64, top_k as f64 / experts as f64);
        let ln_fact: Vec<f64> = (0..=tokens)
            .scan(0.0, |acc, i| {
                if i > 0 {
                    *acc += (i as f64).ln();
                }
                Some(*acc)
            })
            .collect();
        let pmf = |x: u64| {
            let xf = x as f64;
            (ln_fact[tokens as usize] - ln_fact[x as usize] - ln_fact[(tokens - x) as usize]
                + xf * p.ln()
                + (n - xf) * (1.0 - p).ln())
            .exp()
        };
        let tiles = (0..=tokens).map(|x| pmf(x) * x.div_ceil(tile) as f64).sum();
        (tiles, pmf(0))
    }

    #[test]
    fn matches_the_closed_form_pmf() {
        for (tokens, k, e, t) in [
            (1, 8, 256, 16),
            (16, 8, 256, 16),
            (512, 8, 256, 16),
            (1024, 8, 256, 32),
            (3584, 8, 256, 128),
            (4096, 4, 32, 64),
            (16384, 4, 32, 128),
            (7, 3, 5, 2),
        ] {
            let got = RouteCounts::uniform(tokens, k, e, t);
            let (tiles, idle) = direct(tokens, k, e, t);
            assert!((got.tiles_per_expert - tiles).abs() < 1e-9 * tiles.max(1.0), "{tokens} {t}");
            assert!((got.idle - idle).abs() < 1e-9, "{tokens} {t}: {} vs {idle}", got.idle);
        }
    }

    #[test]
    fn a_tile_at_the_mean_count_spills_about_half_the_experts() {
        // DeepSeek's EP slice at 4096 tokens: 128 routes per expert on average; a T 128 tile
        // holds the mean, and about half the experts need a second one.
        let c = RouteCounts::uniform(4096, 8, 256, 128);
        assert!((1.45..1.55).contains(&c.tiles_per_expert), "{c:?}");
        // At 3584 tokens (mean 112) about one expert in twenty spills.
        let c = RouteCounts::uniform(3584, 8, 256, 128);
        assert!((1.03..1.08).contains(&c.tiles_per_expert), "{c:?}");
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(RouteCounts::uniform(0, 8, 256, 16).tiles_per_expert, 0.0);
        assert_eq!(RouteCounts::uniform(5, 8, 0, 16).idle, 1.0);
        // Every expert is every token's: a count of exactly `tokens`.
        let all = RouteCounts::uniform(33, 8, 8, 16);
        assert_eq!((all.tiles_per_expert, all.idle), (3.0, 0.0));
        let one = RouteCounts::uniform(1, 1, 4, 0);
        assert!((one.tiles_per_expert - 0.25).abs() < 1e-12 && (one.idle - 0.75).abs() < 1e-12);
    }
}
