//! GEMM1's width from the live tiles (`MoeTactic::gemm1_wide`): both widths are launched, and
//! the live-tile mask each kernel reads (`Scalar::LiveTileMaskLo`/`Hi`) gives the routing's
//! live-tile count to one of them. Which one follows the persistent schedule: unit `u` runs
//! on CTA `u mod grid`, and the hardware places CTA `c` on SM `c mod SMs` first, so the SM
//! holding CTA 0 holds the most units. A memory-bound GEMM ends when that SM has streamed
//! its weight rows; the width whose busiest SM streams fewer rows wins, and the wider one on
//! a tie (half the activation reads per weight row, one CTA's pipeline instead of several).
//! Measured on an H100 (docs/perf.md, "GEMM1's width from the live tiles"): on DeepSeek's
//! slice the rule picked the faster width at every draw where the two differed by more than
//! the run-to-run spread; on gpt-oss's shape (N 256's last unit per tile is half) three of
//! its ties went to the wide kernel where the narrow one was 3–7 % faster, and the tuner,
//! which times the pair against the single widths, keeps single widths there. Units per
//! tile are counted as the persistent grid counts them (`abi::persistent_units`).

/// Bit 63 of the mask stands for 63 live tiles or more (`Scalar::LiveTileMaskHi`).
pub const LIVE_TILE_MASK_BITS: u64 = 64;

/// How one GEMM kernel spreads a routing's units over the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitSpread {
    /// Weight rows one unit streams (the tactic's N).
    pub rows_per_unit: u64,
    /// Units per live routing tile (N blocks, `abi::persistent_units` of one tile).
    pub units_per_tile: u64,
    /// CTAs of the persistent grid as launched.
    pub ctas: u64,
}

impl UnitSpread {
    /// Weight rows the busiest SM streams when `tiles` routing tiles are live on `sms` SMs.
    pub fn busiest_sm_rows(&self, tiles: u64, sms: u64) -> u64 {
        let (ctas, sms) = (self.ctas.max(1), sms.max(1));
        let units = tiles.saturating_mul(self.units_per_tile);
        let (base, extra) = (units / ctas, units % ctas);
        // SM 0 holds CTAs 0, SMs, 2·SMs, …; those below `extra` run one unit more.
        let on_sm0 = ctas.div_ceil(sms);
        let units_sm0 = on_sm0 * base + extra.div_ceil(sms).min(on_sm0);
        units_sm0.saturating_mul(self.rows_per_unit)
    }

    /// [`Self::busiest_sm_rows`] summed over the tile counts `lo..=hi`, in steps of one
    /// period instead of one count: the unit count grows by a multiple of the CTAs every
    /// `ctas / gcd(units_per_tile, ctas)` tiles, where the busiest SM's rows grow by a fixed
    /// amount and the remainder repeats, so only one period is summed term by term (a pass
    /// bounded at 16384 tokens of T 16 has over 8000 counts above 63). Counts whose units
    /// would not fit a `u64` are summed term by term, saturating as the rule does.
    pub fn busiest_sm_rows_sum(&self, lo: u64, hi: u64, sms: u64) -> u128 {
        if lo > hi {
            return 0;
        }
        let term = |l: u64| u128::from(self.busiest_sm_rows(l, sms));
        let ctas = self.ctas.max(1);
        let u = self.units_per_tile;
        let fits = hi.checked_mul(u).is_some_and(|units| {
            units.checked_add(ctas).is_some()
                && (units / ctas + 1)
                    .checked_mul(ctas.div_ceil(sms.max(1)))
                    .and_then(|x| x.checked_mul(self.rows_per_unit))
                    .is_some()
        });
        if u == 0 || !fits {
            return (lo..=hi).map(term).sum();
        }
        let g = gcd(u, ctas);
        let period = ctas / g;
        // Rows the busiest SM gains from one period to the next: period · u / ctas = u / g
        // more units for every CTA, on each of the busiest SM's CTAs.
        let step = u128::from(self.rows_per_unit)
            * u128::from(ctas.div_ceil(sms.max(1)))
            * u128::from(u / g);
        let n = u128::from(hi - lo) + 1;
        let (q, r) = (n / u128::from(period), n % u128::from(period));
        let first: Vec<u128> = (0..period.min(hi - lo + 1)).map(|i| term(lo + i)).collect();
        let whole: u128 = first.iter().sum();
        let part: u128 = first.iter().take(r as usize).sum();
        let p = u128::from(period);
        q * whole + step * p * q * q.saturating_sub(1) / 2 + part + r * q * step
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The live-tile mask of the wide GEMM1 (the narrow one takes its complement): bit `L` set
/// when at `L` live tiles the wide kernel's busiest SM streams no more weight rows than the
/// narrow one's. Bit 63 stands for every count from 63 to `max_live` (the pass's bound on
/// live tiles) and is set when the wide kernel's busiest-SM rows summed over those counts
/// are no more than the narrow one's: one bit cannot follow the rule count by count there.
pub fn wide_gemm1_mask(narrow: UnitSpread, wide: UnitSpread, sms: u64, max_live: u64) -> u64 {
    let wins = |l: u64| wide.busiest_sm_rows(l, sms) <= narrow.busiest_sm_rows(l, sms);
    let mut mask =
        (1..LIVE_TILE_MASK_BITS - 1).fold(0u64, |m, l| if wins(l) { m | 1 << l } else { m });
    let top = LIVE_TILE_MASK_BITS - 1;
    let hi = max_live.max(top);
    if wide.busiest_sm_rows_sum(top, hi, sms) <= narrow.busiest_sm_rows_sum(top, hi, sms) {
        mask |= 1 << top;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H100 draws of docs/perf.md: DeepSeek's slice (2I = 4096: 32 units of N 128 per
    /// tile on 3 CTAs per SM, 16 of N 256 on 1), 132 SMs.
    #[test]
    fn the_rule_follows_the_measured_deepseek_draws() {
        let narrow = UnitSpread { rows_per_unit: 128, units_per_tile: 32, ctas: 396 };
        let wide = UnitSpread { rows_per_unit: 256, units_per_tile: 16, ctas: 132 };
        let mask = wide_gemm1_mask(narrow, wide, 132, 40);
        let wide_at = |l: u64| mask >> l & 1 == 1;
        // N 256 measured faster at 5, 8, 13–16 live tiles; N 128 at 10, 12, 17, 18, 26.
        for l in [5, 8, 13, 14, 15, 16] {
            assert!(wide_at(l), "{l}");
        }
        for l in [10, 12, 17, 18, 26] {
            assert!(!wide_at(l), "{l}");
        }
        assert_eq!(mask & 1, 0, "no live tile: nothing to choose");
        // Bit 63 sums the counts from 63 up: at 63 alone the widths tie (the wide one
        // would run), over 63–70 the narrow one streams fewer rows on its busiest SM.
        assert_eq!(wide.busiest_sm_rows(63, 132), narrow.busiest_sm_rows(63, 132));
        assert!(wide.busiest_sm_rows(70, 132) > narrow.busiest_sm_rows(70, 132));
        assert_eq!(mask >> 63, 1);
        assert_eq!(wide_gemm1_mask(narrow, wide, 132, 70) >> 63, 0);
        assert_eq!(wide_gemm1_mask(narrow, wide, 132, 70) & !(1 << 63), mask & !(1 << 63));
        // 8 tiles: 128 units of N 256 on 132 CTAs, one each; 256 of N 128, two on SM 0.
        assert_eq!(wide.busiest_sm_rows(8, 132), 256);
        assert_eq!(narrow.busiest_sm_rows(8, 132), 256);
        // 10 tiles: 160 wide units put two on SM 0; 320 narrow ones three (one per CTA).
        assert_eq!(wide.busiest_sm_rows(10, 132), 512);
        assert_eq!(narrow.busiest_sm_rows(10, 132), 384);
    }

    proptest::proptest! {
        /// The sum by periods equals the sum count by count.
        #[test]
        fn the_sum_by_periods_is_the_sum_of_the_terms(
            rows in 1u64..600, units in 0u64..80, ctas in 0u64..700, sms in 0u64..200,
            lo in 0u64..200, len in 0u64..3000,
        ) {
            let s = UnitSpread { rows_per_unit: rows, units_per_tile: units, ctas };
            let hi = lo + len;
            let direct: u128 = (lo..=hi).map(|l| u128::from(s.busiest_sm_rows(l, sms))).sum();
            proptest::prop_assert_eq!(s.busiest_sm_rows_sum(lo, hi, sms), direct);
        }
    }

    #[test]
    fn sums_of_no_count_and_of_counts_past_u64_units() {
        let s = UnitSpread { rows_per_unit: 128, units_per_tile: 32, ctas: 396 };
        assert_eq!(s.busiest_sm_rows_sum(10, 9, 132), 0, "an empty range");
        assert_eq!(s.busiest_sm_rows_sum(7, 7, 132), u128::from(s.busiest_sm_rows(7, 132)));
        // Units past u64: summed term by term, each term saturating as the rule's.
        let big = u64::MAX / 16;
        let direct: u128 = (big..=big + 5).map(|l| u128::from(s.busiest_sm_rows(l, 132))).sum();
        assert_eq!(s.busiest_sm_rows_sum(big, big + 5, 132), direct);
    }

    #[test]
    fn a_grid_smaller_than_the_gpu_and_no_units_are_counted() {
        let s = UnitSpread { rows_per_unit: 128, units_per_tile: 4, ctas: 8 };
        assert_eq!(s.busiest_sm_rows(0, 132), 0);
        assert_eq!(s.busiest_sm_rows(1, 132), 128);
        assert_eq!(s.busiest_sm_rows(3, 132), 2 * 128);
        let one = UnitSpread { rows_per_unit: 64, units_per_tile: 1, ctas: 0 };
        assert_eq!(one.busiest_sm_rows(5, 0), 5 * 64, "zero CTAs or SMs count as one");
    }
}
