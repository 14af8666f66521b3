//! How many routing tiles a batch's routes fill when tokens choose their experts uniformly
//! at random: the dispatch model's view of the autotuner's routing (`tune::uniform_routing`).
//!
//! Each token takes `top_k` distinct experts of `experts`, so a given expert is among a
//! token's choices with probability p = top_k / experts: its route count is
//! Binomial(tokens, p). An expert whose count is just above a multiple of the tile size
//! dequantizes its weights once more (from L2) for a nearly empty tile, which a model of
//! evenly spread routes (every expert at the mean) never sees; and at a few tokens what a
//! tactic costs turns on how the live tiles fall into waves of persistent units, which the
//! mean count alone hides (a paired GEMM1 gains only from that spread).

/// The distribution of a batch's live routing tiles of `tile` rows over the `local` experts
/// (of `experts`) a layer holds, for `tokens` tokens that each choose `top_k` distinct experts
/// uniformly.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LiveTileSpread {
    /// (live tiles, probability) over the counts that matter, the probabilities summing to 1.
    pub pmf: Vec<(u64, f64)>,
    /// The expected local experts with at least one route (each streams its weights once).
    pub touched: f64,
}

/// Terms below this fraction of the mode's are dropped: past about 8.3 standard deviations
/// either side, far below what changes a ranking.
const NEGLIGIBLE: f64 = 1e-15;

impl LiveTileSpread {
    /// `tile` 0 is taken as 1; `local` above `experts` as `experts`.
    ///
    /// With no more tokens than a tile holds, every touched expert fills exactly one tile and
    /// the live tiles are the distinct local experts touched: exact, one token at a time.
    /// Above, each expert's tiles ⌈X / tile⌉ with X ~ Binomial(tokens, p), summed over the
    /// local experts as if independent: the counts of one token's distinct experts are
    /// slightly anti-correlated (with every expert local their sum is fixed), so this
    /// overstates the spread of their sum, not that of the tiles' rounding.
    pub(crate) fn uniform(tokens: u64, top_k: u64, experts: u64, local: u64, tile: u64) -> Self {
        let tile = tile.max(1);
        let local = local.min(experts);
        if tokens <= tile {
            let pmf = touched_pmf(tokens, top_k, experts, local);
            let touched = pmf.iter().map(|&(l, p)| l as f64 * p).sum();
            return Self { pmf, touched };
        }
        // One expert's tiles, indexed from its lowest tile count (the counts that matter
        // span O(√tokens), whatever `tokens`).
        let counts = expert_count_pmf(tokens, top_k, experts);
        let idle: f64 = counts.iter().filter(|t| t.0 == 0).map(|t| t.1).sum();
        let tiles = |x: u64| x.div_ceil(tile);
        let lo = counts.iter().map(|t| tiles(t.0)).min().unwrap_or(0);
        let hi = counts.iter().map(|t| tiles(t.0)).max().unwrap_or(0);
        let mut one = vec![0.0f64; (hi - lo) as usize + 1];
        for (x, w) in counts {
            one[(tiles(x) - lo) as usize] += w;
        }
        let pmf = if one.len() <= MAX_CONVOLVED {
            convolved(&one, lo, local)
        } else {
            normal(&one, lo, local)
        };
        Self { pmf, touched: local as f64 * (1.0 - idle) }
    }
}

/// Above this many tile counts per expert (about 4 tiles' standard deviation: more than
/// 125 000 tokens of DeepSeek's slice at T 16), the sum over the local experts is taken as
/// normal instead of convolved, which would cost local × its width × this per bucket.
const MAX_CONVOLVED: usize = 64;

/// At most this many points of a normal sum, spaced evenly.
const MAX_NORMAL_POINTS: u64 = 1024;

/// The sum of `local` independent copies of `one` (probabilities of `lo`, `lo` + 1, … tiles):
/// one convolution per expert, the tails far below the mode's weight cut as they appear.
fn convolved(one: &[f64], lo: u64, local: u64) -> Vec<(u64, f64)> {
    let (mut offset, mut sum) = (0u64, vec![1.0f64]);
    for _ in 0..local {
        let mut next = vec![0.0; sum.len() + one.len() - 1];
        for (i, &a) in sum.iter().enumerate() {
            for (j, &b) in one.iter().enumerate() {
                next[i + j] += a * b;
            }
        }
        let top = next.iter().copied().fold(0.0, f64::max);
        let keep = |w: &f64| *w >= NEGLIGIBLE * top;
        let first = next.iter().position(keep).unwrap_or(0);
        let last = next.iter().rposition(keep).unwrap_or(0);
        offset += lo + first as u64;
        sum = next[first..=last].to_vec();
    }
    let mass: f64 = sum.iter().sum();
    sum.iter().enumerate().map(|(i, &w)| (offset + i as u64, w / mass)).collect()
}

/// The same sum as [`convolved`] taken as normal, with its exact mean and variance, over
/// ±8.3 standard deviations (where [`NEGLIGIBLE`] cuts) at most [`MAX_NORMAL_POINTS`] points.
fn normal(one: &[f64], lo: u64, local: u64) -> Vec<(u64, f64)> {
    let n = local as f64;
    let mean1: f64 = one.iter().enumerate().map(|(i, &w)| (lo as f64 + i as f64) * w).sum();
    let var1: f64 =
        one.iter().enumerate().map(|(i, &w)| (lo as f64 + i as f64 - mean1).powi(2) * w).sum();
    let (mean, sd) = (n * mean1, (n * var1).sqrt());
    if sd <= 0.0 {
        return vec![(mean.round() as u64, 1.0)];
    }
    let from = (mean - 8.3 * sd).floor().max(0.0) as u64;
    let to = (mean + 8.3 * sd).ceil() as u64;
    let step = (to - from).div_ceil(MAX_NORMAL_POINTS).max(1);
    let points: Vec<(u64, f64)> = (from..=to)
        .step_by(usize::try_from(step).unwrap_or(usize::MAX))
        .map(|l| (l, (-0.5 * ((l as f64 - mean) / sd).powi(2)).exp()))
        .collect();
    let mass: f64 = points.iter().map(|t| t.1).sum();
    points.into_iter().map(|(l, w)| (l, w / mass)).collect()
}

/// The distribution of the distinct experts among `local` (of `experts`) that `tokens`
/// tokens touch, each taking `top_k` distinct experts uniformly: with j local experts
/// touched so far, the count of new ones a token takes is hypergeometric (`top_k` draws from
/// `local` − j new against `experts` − `local` + j others).
fn touched_pmf(tokens: u64, top_k: u64, experts: u64, local: u64) -> Vec<(u64, f64)> {
    let (e, m) = (experts as usize, local.min(experts) as usize);
    let k = top_k.min(experts) as usize;
    let ln_fact = ln_factorials(e);
    let ln_choose = |n: usize, r: usize| ln_fact[n] - ln_fact[r] - ln_fact[n - r];
    // new[j][a]: P(a new local experts | j touched), computed once.
    let new: Vec<Vec<f64>> = (0..=m)
        .map(|j| {
            (0..=k.min(m - j))
                .map(|a| {
                    if k - a > e - m + j {
                        return 0.0;
                    }
                    (ln_choose(m - j, a) + ln_choose(e - m + j, k - a) - ln_choose(e, k)).exp()
                })
                .collect()
        })
        .collect();
    let mut dp = vec![0.0f64; m + 1];
    dp[0] = 1.0;
    for _ in 0..tokens {
        let mut next = vec![0.0f64; m + 1];
        for (j, &w) in dp.iter().enumerate().filter(|t| *t.1 > 0.0) {
            for (a, &p) in new[j].iter().enumerate() {
                next[j + a] += w * p;
            }
        }
        dp = next;
    }
    // The log-factorials' rounding leaves each row's sum a few ulps from 1.
    let mass: f64 = dp.iter().sum();
    if mass.is_nan() || mass <= 0.0 {
        return vec![(0, 1.0)];
    }
    dp.into_iter().enumerate().filter(|t| t.1 > 0.0).map(|(j, w)| (j as u64, w / mass)).collect()
}

/// ln 0!, ln 1!, …, ln n!.
fn ln_factorials(n: usize) -> Vec<f64> {
    (0..=n)
        .scan(0.0, |acc, i| {
            if i > 0 {
                *acc += (i as f64).ln();
            }
            Some(*acc)
        })
        .collect()
}

/// One expert's route count, Binomial(tokens, top_k / experts), as (count, probability)
/// over the counts that matter (their probabilities summing to 1).
fn expert_count_pmf(tokens: u64, top_k: u64, experts: u64) -> Vec<(u64, f64)> {
    let p = if experts == 0 { 0.0 } else { (top_k as f64 / experts as f64).min(1.0) };
    if tokens == 0 || p <= 0.0 {
        return vec![(0, 1.0)];
    }
    if p >= 1.0 {
        return vec![(tokens, 1.0)];
    }
    // The probabilities relative to the mode's, walking out from the mode with the ratio
    // P(x + 1) / P(x) = (n − x) / (x + 1) · p / q: no factorials, no overflow, and only
    // the O(√n) terms that matter.
    let n = tokens as f64;
    let odds = p / (1.0 - p);
    let mode = ((n + 1.0) * p).floor().min(n) as u64;
    let mut terms = vec![(mode, 1.0f64)];
    let (mut w, mut x) = (1.0f64, mode);
    while x < tokens {
        w *= (n - x as f64) / (x as f64 + 1.0) * odds;
        x += 1;
        if w < NEGLIGIBLE {
            break;
        }
        terms.push((x, w));
    }
    let (mut w, mut x) = (1.0f64, mode);
    while x > 0 {
        w *= x as f64 / (n - x as f64 + 1.0) / odds;
        x -= 1;
        if w < NEGLIGIBLE {
            break;
        }
        terms.push((x, w));
    }
    let mass: f64 = terms.iter().map(|t| t.1).sum();
    terms.iter_mut().for_each(|t| t.1 /= mass);
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same expectations by brute force over every count, from the pmf in closed form
    /// (log-factorials summed directly).
    fn direct(tokens: u64, top_k: u64, experts: u64, tile: u64) -> (f64, f64) {
        let (n, p) = (tokens as f64, top_k as f64 / experts as f64);
        let ln_fact = ln_factorials(tokens as usize);
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

    /// The expected tiles per expert and probability of no route from a spread over one
    /// local expert.
    fn one_expert(tokens: u64, k: u64, e: u64, t: u64) -> (f64, f64) {
        let s = LiveTileSpread::uniform(tokens, k, e, 1, t);
        let tiles = s.pmf.iter().map(|&(l, p)| l as f64 * p).sum();
        (tiles, 1.0 - s.touched)
    }

    fn total(s: &LiveTileSpread) -> f64 {
        s.pmf.iter().map(|t| t.1).sum()
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
            let (got_tiles, got_idle) = one_expert(tokens, k, e, t);
            let (tiles, idle) = direct(tokens, k, e, t);
            assert!((got_tiles - tiles).abs() < 1e-9 * tiles.max(1.0), "{tokens} {t}");
            assert!((got_idle - idle).abs() < 1e-9, "{tokens} {t}: {got_idle} vs {idle}");
        }
    }

    /// Whatever the correlation between experts, the mean of the sum is the sum of the
    /// means: both paths against the closed form, over many local experts.
    #[test]
    fn the_mean_live_tiles_are_local_times_one_experts() {
        for (tokens, k, e, local, t) in [
            (16, 8, 256, 32, 16),
            (100, 8, 256, 32, 128),
            (512, 8, 256, 32, 16),
            (4096, 4, 32, 32, 64),
            (16384, 4, 32, 32, 16),
            (3, 4, 32, 32, 16),
        ] {
            let s = LiveTileSpread::uniform(tokens, k, e, local, t);
            assert!((total(&s) - 1.0).abs() < 1e-12, "{s:?}");
            let mean: f64 = s.pmf.iter().map(|&(l, p)| l as f64 * p).sum();
            let (tiles, idle) = direct(tokens, k, e, t);
            let want = local as f64 * tiles;
            assert!((mean - want).abs() < 1e-6 * want.max(1.0), "{tokens} {t}: {mean} vs {want}");
            let touched = local as f64 * (1.0 - idle);
            assert!((s.touched - touched).abs() < 1e-9 * touched.max(1.0), "{tokens} {t}");
        }
    }

    /// The distinct experts touched, against every way 3 tokens can each take 2 of 5
    /// experts, 3 of them local.
    #[test]
    fn touched_experts_by_enumeration() {
        let pairs: Vec<[u32; 2]> = (0..5).flat_map(|a| (a + 1..5).map(move |b| [a, b])).collect();
        let mut counts = [0u32; 4];
        for x in &pairs {
            for y in &pairs {
                for z in &pairs {
                    let mut seen = 0u32;
                    for &ex in x.iter().chain(y).chain(z) {
                        if ex < 3 {
                            seen |= 1 << ex;
                        }
                    }
                    counts[seen.count_ones() as usize] += 1;
                }
            }
        }
        let all = (pairs.len() as f64).powi(3);
        let s = LiveTileSpread::uniform(3, 2, 5, 3, 16);
        for (j, &c) in counts.iter().enumerate() {
            let got = s.pmf.iter().find(|t| t.0 == j as u64).map_or(0.0, |t| t.1);
            assert!((got - f64::from(c) / all).abs() < 1e-12, "{j}: {got} vs {c}/{all}");
        }
    }

    /// With every expert local, 2 tokens of top 4 among 32 touch 8 experts less their
    /// overlap (4 to 8): the spread the binomial sum would give (as low as 0) never appears.
    #[test]
    fn few_tokens_touch_at_least_top_k_experts() {
        let s = LiveTileSpread::uniform(2, 4, 32, 32, 16);
        assert!(s.pmf.iter().all(|&(l, p)| (4..=8).contains(&l) && p > 0.0), "{s:?}");
        assert!((total(&s) - 1.0).abs() < 1e-12);
    }

    /// Two local experts: the spread is the explicit convolution of one expert's tile
    /// counts (from the closed-form pmf) with itself.
    #[test]
    fn two_experts_are_one_convolved_with_itself() {
        let (tokens, k, e, t) = (200u64, 8, 64, 16);
        let p = k as f64 / e as f64;
        let ln_fact = ln_factorials(tokens as usize);
        let pmf = |x: u64| {
            let xf = x as f64;
            (ln_fact[tokens as usize] - ln_fact[x as usize] - ln_fact[(tokens - x) as usize]
                + xf * p.ln()
                + (tokens as f64 - xf) * (1.0 - p).ln())
            .exp()
        };
        let mut one = vec![0.0; (tokens.div_ceil(t) + 1) as usize];
        for x in 0..=tokens {
            one[x.div_ceil(t) as usize] += pmf(x);
        }
        let s = LiveTileSpread::uniform(tokens, k, e, 2, t);
        for (l, got) in s.pmf {
            let want: f64 = (0..=l as usize)
                .filter(|&a| a < one.len() && l as usize - a < one.len())
                .map(|a| one[a] * one[l as usize - a])
                .sum();
            assert!((got - want).abs() < 1e-12, "{l}: {got} vs {want}");
        }
    }

    /// Past the convolution's width the sum is normal: still fast at ten million tokens,
    /// with the right mean, and every expert taking every token (p = 1) one exact count.
    #[test]
    fn many_tokens_stay_cheap() {
        let (tokens, k, e, local, t) = (10_000_000u64, 8, 256, 32, 16);
        let start = std::time::Instant::now();
        let s = LiveTileSpread::uniform(tokens, k, e, local, t);
        assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
        assert!(s.pmf.len() as u64 <= MAX_NORMAL_POINTS + 1, "{}", s.pmf.len());
        assert!((total(&s) - 1.0).abs() < 1e-12);
        let mean: f64 = s.pmf.iter().map(|&(l, p)| l as f64 * p).sum();
        // Each expert's count is about 312 500, so its tiles are its count / 16 plus about
        // a half for the last, partly filled one.
        let want = local as f64 * (tokens as f64 * k as f64 / e as f64 / t as f64 + 0.5);
        assert!((mean - want).abs() < 1e-4 * want, "{mean} vs {want}");
        let all = LiveTileSpread::uniform(1 << 40, 8, 8, 8, 16);
        assert_eq!(all.pmf, vec![(8 << 36, 1.0)]);
    }

    /// The normal sum keeps the convolution's mean and spread: one expert's tile counts
    /// about 60 wide, summed over 32 experts both ways.
    #[test]
    fn the_normal_sum_has_the_convolutions_mean_and_spread() {
        let one: Vec<f64> =
            (0..61).map(|i| (-0.5 * ((i as f64 - 30.0) / 7.5).powi(2)).exp()).collect();
        let mass: f64 = one.iter().sum();
        let one: Vec<f64> = one.iter().map(|w| w / mass).collect();
        let moments = |pmf: &[(u64, f64)]| {
            let m: f64 = pmf.iter().map(|&(l, p)| l as f64 * p).sum();
            let v: f64 = pmf.iter().map(|&(l, p)| (l as f64 - m).powi(2) * p).sum();
            (m, v.sqrt())
        };
        let (cm, cs) = moments(&convolved(&one, 100, 32));
        let (nm, ns) = moments(&normal(&one, 100, 32));
        assert!((cm - nm).abs() < 1e-6 * cm, "{cm} vs {nm}");
        assert!((cs - ns).abs() < 0.01 * cs, "{cs} vs {ns}");
        // 32 × (100 + 30) tiles, spread √32 × 7.5.
        assert!((cm - 4160.0).abs() < 1e-6 * cm && (cs - 42.43).abs() < 0.1, "{cm} {cs}");
    }

    #[test]
    fn a_tile_at_the_mean_count_spills_about_half_the_experts() {
        // DeepSeek's EP slice at 4096 tokens: 128 routes per expert on average; a T 128 tile
        // holds the mean, and about half the experts need a second one.
        let (tiles, _) = one_expert(4096, 8, 256, 128);
        assert!((1.45..1.55).contains(&tiles), "{tiles}");
        // At 3584 tokens (mean 112) about one expert in twenty spills.
        let (tiles, _) = one_expert(3584, 8, 256, 128);
        assert!((1.03..1.08).contains(&tiles), "{tiles}");
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(one_expert(0, 8, 256, 16).0, 0.0);
        assert_eq!(one_expert(5, 8, 0, 16).1, 1.0);
        assert_eq!(LiveTileSpread::uniform(5, 8, 0, 4, 16).pmf, vec![(0, 1.0)]);
        // Every expert is every token's: a count of exactly `tokens`.
        let all = LiveTileSpread::uniform(33, 8, 8, 8, 16);
        assert_eq!((all.pmf.clone(), all.touched), (vec![(24, 1.0)], 8.0));
        let one = one_expert(1, 1, 4, 0);
        assert!((one.0 - 0.25).abs() < 1e-12 && (one.1 - 0.75).abs() < 1e-12);
    }
}
