//! The MUFU sweep harness: the generated sweep kernel run on the simulator must reproduce
//! the models on spread and dense input ranges (so on a GPU any difference is the
//! hardware's), and the comparison must count, classify and rank planted differences.

use moegen_dsl::abi::mufu_sweep::{MufuOp, WORDS_PER_INPUT, sweep_input};
use moegen_runtime::backend::sim::SimBackend;
use moegen_validation::mufu_check::{Sweep, SweepError, sweep};
use moegen_validation::mufu_tally::{
    MismatchClass, OpTally, bound_ulps, classify, compare, model, ulp_distance,
};

fn run(s: Sweep) -> Vec<OpTally> {
    let mut calls = Vec::new();
    let t = sweep(&mut SimBackend::hopper(), s, &mut |done| calls.push(done)).unwrap();
    let launches = s.count.div_ceil(u64::from(s.chunk));
    assert_eq!(calls.len() as u64, launches, "one progress call per launch");
    assert_eq!(calls.last(), Some(&s.count));
    t
}

fn assert_all_identical(t: &[OpTally], inputs: u64) {
    assert_eq!(t.len(), MufuOp::ALL.len());
    for (tally, op) in t.iter().zip(MufuOp::ALL) {
        assert_eq!(tally.op, op.ptx());
        assert_eq!(tally.inputs, inputs, "{}", tally.op);
        assert_eq!(tally.identical, inputs, "{}: {:?}", tally.op, tally.classes);
        assert!(tally.classes.is_empty() && tally.bit_exact() && tally.within_bound());
    }
}

#[test]
fn the_simulated_sweep_matches_the_models_over_a_spread_of_inputs() {
    // 1025 inputs over the whole range (both signs, every exponent), in three launches of
    // unequal size so the chunk arithmetic is exercised.
    let s = Sweep::spread(4_190_213, 400).unwrap();
    assert_eq!(s.count, 1025);
    assert_all_identical(&run(s), 1025);
}

#[test]
fn the_simulated_sweep_matches_the_models_where_they_are_delicate() {
    // Dense windows: around the subnormal/normal boundary (the flush decisions), around
    // 2^32 − 1 wrapping into +0, around ex2's overflow at 128 and underflow near −126…−150.
    for (base, count) in [
        (0x007F_FF00u32, 512u64),
        (0xFFFF_FF00, 512),
        (128f32.to_bits() - 256, 512),
        ((-126f32).to_bits() - 128, 256),
        ((-149.5f32).to_bits() - 128, 256),
    ] {
        let s = Sweep { base, step: 1, count, chunk: 256 };
        assert_all_identical(&run(s), count);
    }
}

#[test]
fn invalid_sweeps_are_refused_by_name() {
    for s in [
        Sweep { base: 0, step: 1, count: 0, chunk: 16 },
        Sweep { base: 0, step: 0, count: 16, chunk: 16 },
        Sweep { base: 0, step: 1, count: 16, chunk: 0 },
        Sweep { base: 0, step: 1, count: 16, chunk: (1 << 30) + 1 },
        Sweep { base: 0, step: 1, count: (1 << 32) + 1, chunk: 16 },
        // 2^31 + 1 inputs at step 2 reach 2^32 and repeat input 0.
        Sweep { base: 0, step: 2, count: (1 << 31) + 1, chunk: 16 },
    ] {
        let e = sweep(&mut SimBackend::hopper(), s, &mut |_| {}).unwrap_err();
        assert!(matches!(e, SweepError::Invalid(_)), "{s:?}: {e}");
    }
    assert!(matches!(Sweep::spread(0, 16), Err(SweepError::Invalid(_))));
}

#[test]
fn the_launches_cover_every_input_once() {
    for (s, launches) in [
        (Sweep::EXHAUSTIVE, 16),
        (Sweep::spread(3, 1 << 28).unwrap(), 6),
        (Sweep::spread(1, 1_000_000_007).unwrap(), 5),
        (Sweep { base: 7, step: 5, count: 10, chunk: 4 }, 3),
    ] {
        let chunks: Vec<(u64, u64)> = s.chunks().collect();
        assert_eq!(chunks.len(), launches, "{s:?}");
        let mut next = 0;
        for &(first, n) in &chunks {
            assert_eq!(first, next, "{s:?}: contiguous");
            assert!(n >= 1 && n <= u64::from(s.chunk));
            next += n;
        }
        assert_eq!(next, s.count, "{s:?}");
    }
    // The spread reaches the top of the range without wrapping.
    let s = Sweep::spread(3, 1 << 28).unwrap();
    assert_eq!(s.count, 1_431_655_766);
    assert!((s.count - 1) * 3 < 1 << 32);
}

/// Model words for inputs `base + i·step`, as a perfect backend would write them.
fn model_words(base: u32, step: u32, n: u32) -> Vec<u32> {
    (0..n)
        .flat_map(|i| {
            let x = f32::from_bits(sweep_input(base, step, i));
            MufuOp::ALL.map(|op| model(op)(x).to_bits())
        })
        .collect()
}

#[test]
fn planted_differences_are_counted_classified_and_ranked() {
    let (base, step, n) = (0x3F00_0000u32, 977u32, 5000u32);
    let mut words = model_words(base, step, n);
    assert!(compare(base, step, &words).unwrap().iter().all(|t| t.mismatches() == 0));
    let at = |i: usize, op: usize| i * WORDS_PER_INPUT + op;
    // ex2.approx.ftz: one result 1 ulp up, one 2 ulp down.
    words[at(10, 0)] += 1;
    words[at(20, 0)] -= 2;
    // rcp.approx: a NaN where a number belongs.
    words[at(30, 3)] = 0x7FC0_0000;
    let tallies = compare(base, step, &words).unwrap();
    let ex2 = &tallies[0];
    assert_eq!((ex2.inputs, ex2.mismatches(), ex2.finite_ulps()), (u64::from(n), 2, 2));
    let finite = &ex2.classes[&MismatchClass::Finite];
    assert_eq!(
        finite.ulp_histogram.iter().map(|(&d, &c)| (d, c)).collect::<Vec<_>>(),
        [(1, 1), (2, 1)]
    );
    assert_eq!(finite.worst[0].ulps, Some(2), "worst first");
    assert_eq!(finite.worst[0].x, sweep_input(base, step, 20));
    assert!(!ex2.bit_exact() && ex2.within_bound(), "2 ulp is within ex2's bound");
    assert_eq!(tallies[1].mismatches() + tallies[2].mismatches(), 0);
    let rcp = &tallies[3];
    let nan = &rcp.classes[&MismatchClass::Nan];
    assert_eq!((nan.count, nan.worst[0].ulps, nan.max_ulps), (1, None, None));
    assert!(nan.ulp_histogram.is_empty(), "NaN mismatches have no distance");
    assert!(!rcp.within_bound(), "a NaN where the model has a number is out of bounds");
    // Beyond the bounds: 3 ulp for ex2 (bound 2), 2 ulp for rcp.approx.ftz (bound 1).
    words[at(40, 1)] += 3;
    words[at(40, 2)] += 2;
    let t = compare(base, step, &words).unwrap();
    assert_eq!((t[1].finite_ulps(), t[2].finite_ulps()), (3, 2));
    assert_eq!((t[1].bound_ulps, t[2].bound_ulps), (2, 1));
    assert!(!t[1].within_bound() && !t[2].within_bound());
    // At the bound: 1 ulp for rcp is within.
    words[at(40, 2)] -= 1;
    assert!(compare(base, step, &words).unwrap()[2].within_bound(), "1 ulp is within rcp's bound");
    assert!(compare(base, step, &words[..7]).is_none(), "a partial row is refused");
}

#[test]
fn distances_and_classes_follow_the_float_line() {
    let one = 1f32.to_bits();
    assert_eq!(ulp_distance(0, 0x8000_0000), 0, "+0 and −0 coincide");
    assert_eq!(ulp_distance(one, one + 1), 1);
    assert_eq!(ulp_distance(1, 0x8000_0001), 2, "across zero");
    assert_eq!(ulp_distance(0x7F7F_FFFF, 0x7F80_0000), 1, "MAX to +inf");
    assert_eq!(classify(0x7FC0_0001, 0x7FFF_FFFF), MismatchClass::NanPayload);
    assert_eq!(classify(one, 0x7FFF_FFFF), MismatchClass::Nan);
    assert_eq!(classify(0, 0x8000_0000), MismatchClass::ZeroSign);
    assert_eq!(classify(0x7F80_0000, 0x7F7F_FFFF), MismatchClass::Infinity);
    // Flushed against the smallest normal, and two subnormals: flush decisions.
    assert_eq!(classify(0, 0x0080_0000), MismatchClass::NearSubnormal);
    assert_eq!(classify(0x0000_0010, 0x0000_0011), MismatchClass::NearSubnormal);
    // Flushed against a value ≥ 2^-125 is a real error, measured in ulp.
    let big = 2f32.powi(-124).to_bits();
    assert_eq!(classify(0, big), MismatchClass::Finite);
    assert_eq!(classify(one, one + 1), MismatchClass::Finite);
}

/// The H200's committed sweep (docs/validation-2026-12-01-mufu.json) is what docs/reference.md
/// instantiates the Fast recipe's tolerance with: every input compared, d at each
/// instruction's bound, no disagreement about NaN, infinities or the sign of zero.
#[test]
fn the_committed_h200_sweep_meets_the_bounds_the_tolerance_uses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/validation-2026-12-01-mufu.json");
    let text = std::fs::read_to_string(path).expect("the committed H200 MUFU record");
    let record: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let ops = record["mufu"].as_array().expect("a `mufu` array");
    assert_eq!(ops.len(), MufuOp::ALL.len());
    for (row, op) in ops.iter().zip(MufuOp::ALL) {
        assert_eq!(row["op"], op.ptx());
        assert_eq!(row["inputs"], 1u64 << 32, "{}: every input", op.ptx());
        let classes = row["classes"].as_object().expect("classes");
        for bad in ["Nan", "Infinity", "ZeroSign"] {
            assert!(!classes.contains_key(bad), "{}: {bad} mismatches", op.ptx());
        }
        let d = classes["Finite"]["max_ulps"].as_u64().expect("d");
        assert_eq!(d, bound_ulps(op), "{}: d equals the ISA bound the tolerance takes", op.ptx());
        let tiny = classes["NearSubnormal"]["max_ulps"].as_u64().expect("flush-region distance");
        assert!(tiny <= bound_ulps(op), "{}: no flush disagreement below 2^-125", op.ptx());
        let counted: u64 = classes.values().map(|c| c["count"].as_u64().expect("count")).sum();
        assert_eq!(row["identical"].as_u64().expect("identical") + counted, 1u64 << 32);
    }
}
