//! A Hopper tactic pairing GEMM1 N 128 with N 256 (`MoeTactic::gemm1_wide`) on the simulated
//! Hopper: both kernels are launched, the live-tile mask gives the units to one of them, and
//! the layer's output is the reference's bit for bit whichever runs. The simulator counts
//! thread-instructions, so the test also sees that only one of the two did the GEMM: the
//! pair costs one width's layer plus the other kernel's prologue, not both GEMMs.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, FinalizeMode, TileSize};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::{KernelSet, UnitSpread, wide_gemm1_mask};
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::{ExpertWindow, moe_sort};
use moegen_validation::layer_check::{
    LayerCase, RoutePattern, TacticRow, check_tactics_picked, problem,
};

const NARROW: &str = "t16:gemm1_sm90_t16n128:gemm2_sm90_t16n128";
const WIDE: &str = "t16:gemm1_sm90_t16n256:gemm2_sm90_t16n128";
const PAIR: &str = "t16:gemm1_sm90_t16n128|n256:gemm2_sm90_t16n128";

fn rows(routes: RoutePattern, activations: ActivationFormat) -> Vec<TacticRow> {
    // I 256: 2I = 512 is 4 units of N 128 per tile and 2 of N 256.
    let shape = MoeShape::new(320, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    run(shape, 8, routes, activations, 4).0
}

/// The T 16 rows of a case, and its live tiles (the CPU routing sort's count).
fn run(
    shape: MoeShape,
    tokens: usize,
    routes: RoutePattern,
    activations: ActivationFormat,
    sms: u32,
) -> (Vec<TacticRow>, u64) {
    let case = LayerCase::new(
        shape,
        tokens,
        activations,
        WeightFormat::Mxfp4,
        FinalizeMode::Deterministic,
        7,
        routes,
    );
    let p = problem(case).unwrap();
    let sort = moe_sort(&p.routing.experts, tokens, &shape.window, TileSize::T16).unwrap();
    let tiles = u64::try_from(sort.num_non_exiting_tiles).unwrap();
    let mut sim = SimBackend::hopper().with_sm_count(sms);
    let named = Some("t16:gemm1_sm90_t16n");
    let rows = check_tactics_picked(&mut sim, &p, None, named, &KernelSet::builtin()).unwrap();
    (rows.into_iter().filter(|r| r.tactic.ends_with("gemm2_sm90_t16n128")).collect(), tiles)
}

fn row<'a>(rows: &'a [TacticRow], name: &str) -> &'a TacticRow {
    rows.iter().find(|r| r.tactic == name).unwrap_or_else(|| panic!("no row {name}"))
}

#[test]
fn the_live_tiles_give_gemm1_to_one_width_and_the_output_is_exact() {
    // On 4 SMs (T 16: 3 CTAs of N 128 per SM, 1 of N 256; 12 and 4 CTAs): one live tile puts
    // 1 N-128 unit (128 rows) or 1 N-256 unit (256 rows) on SM 0, so the narrow kernel runs;
    // two tie at 256 rows and the wide one runs (the rule, `live_tiles.rs`).
    let narrow = UnitSpread { rows_per_unit: 128, units_per_tile: 4, ctas: 12 };
    let wide = UnitSpread { rows_per_unit: 256, units_per_tile: 2, ctas: 4 };
    let mask = wide_gemm1_mask(narrow, wide, 4, 8);
    assert_eq!((mask >> 1 & 1, mask >> 2 & 1), (0, 1));
    for acts in [ActivationFormat::Bf16, ActivationFormat::Fp8] {
        // No live tile: each kernel alone costs its prologue and teardown; the pair's extra
        // over either single tactic is the other kernel's, what it costs when it skips.
        let skips = skips(&rows(RoutePattern::NoneLocal, acts));
        for (routes, live, wide_runs) in
            [(RoutePattern::OneExpert, 1, false), (RoutePattern::SomeEmpty, 2, true)]
        {
            let label = format!("{acts:?} {routes:?} ({live} live tiles)");
            let chosen = one_width_ran(&label, &rows(routes, acts), wide_runs, skips);
            assert!(chosen.1 < 0.1 * chosen.0, "{label}: a skip is a prologue");
        }
    }
}

/// What each kernel of the pair costs when it does no unit, `(wide, narrow)`: the pair's
/// extra over the other width's layer with no live tile.
fn skips(none: &[TacticRow]) -> (f64, f64) {
    let (n, w, p) = (row(none, NARROW), row(none, WIDE), row(none, PAIR));
    let s = (p.forward_ms - n.forward_ms, p.forward_ms - w.forward_ms);
    assert!(s.0 > 0.0 && s.1 > 0.0, "{n:?} {w:?} {p:?}");
    s
}

/// Every row is the reference's bit for bit, and the pair costs the chosen width's layer plus
/// the other kernel's skip: the other width did none of the GEMM. Returns the chosen width's
/// cost and the skip.
fn one_width_ran(
    label: &str,
    rows: &[TacticRow],
    wide_runs: bool,
    skips: (f64, f64),
) -> (f64, f64) {
    for r in rows {
        assert_eq!(r.identical, r.elements, "{label} {}: max ulp {}", r.tactic, r.max_ulp);
    }
    let (n, w, p) = (row(rows, NARROW), row(rows, WIDE), row(rows, PAIR));
    let (chosen, skip) = if wide_runs { (w, skips.1) } else { (n, skips.0) };
    let extra = p.forward_ms - chosen.forward_ms;
    assert!(
        (extra - skip).abs() <= 1e-3 * skip,
        "{label}: the pair costs {} = {} ({}) + {extra}, the skip {skip}",
        p.forward_ms,
        chosen.forward_ms,
        chosen.tactic
    );
    (chosen.forward_ms, skip)
}

/// Live-tile counts past 31 read the mask's high word, and from 63 its last bit: on 5 SMs
/// (15 CTAs of N 128, 5 of N 256) with I 128 (2 units of N 128 per tile, 1 of N 256) the
/// rule's verdict at those counts differs from its verdict 32 tiles lower, so a kernel that
/// read the wrong word or bit would run the other width, which the instruction count shows.
#[test]
fn counts_past_31_and_63_read_the_high_word_and_its_last_bit() {
    let narrow = UnitSpread { rows_per_unit: 128, units_per_tile: 2, ctas: 15 };
    let wide = UnitSpread { rows_per_unit: 256, units_per_tile: 1, ctas: 5 };
    let acts = ActivationFormat::Bf16;
    for (experts, tokens, from_63) in [(48, 120, false), (96, 400, true)] {
        // One route per token, all but 8 of the model's experts local (none-local needs some).
        let window = ExpertWindow::new(experts + 8, 0, experts, 1).unwrap();
        let shape = MoeShape::new(128, 128, window).unwrap();
        let skips = skips(&run(shape, tokens, RoutePattern::NoneLocal, acts, 5).0);
        let (rows, live) = run(shape, tokens, RoutePattern::Spread, acts, 5);
        let bound = moegen_dsl::plan::max_tiles(tokens as u64, experts as u64, 16).unwrap();
        let mask = wide_gemm1_mask(narrow, wide, 5, bound);
        let bit = live.min(63);
        let wide_runs = mask >> bit & 1 == 1;
        // The case means something only if a kernel that read the low word (below 63
        // tiles) or skipped the clamp to bit 63 (from 63) would choose otherwise.
        assert!(live >= 33, "{live} live tiles");
        assert_eq!(live >= 63, from_63, "{live} live tiles: the case covers the other bit");
        let wrong = if live < 63 { live - 32 } else { 32 + ((live - 32) & 31) };
        assert_ne!(wide_runs, mask >> wrong & 1 == 1, "{live} tiles: pick another case");
        one_width_ran(&format!("{live} live tiles"), &rows, wide_runs, skips);
    }
}
