//! The MUFU sweep harness: the generated sweep kernel run on the simulator must reproduce
//! the models on spread and dense input ranges (so on a GPU any difference is the
//! hardware's), and the comparison must count, classify and rank planted differences.

use moegen_dsl::abi::mufu_sweep::{MufuOp, WORDS_PER_INPUT, sweep_input};
use moegen_runtime::backend::sim::SimBackend;
use moegen_validation::mufu_check::{
    MismatchClass, OpTally, Sweep, SweepError, classify, compare, model, sweep, ulp_distance,
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
        assert_eq!(tally.identical, inputs, "{}: {:?}", tally.op, tally.worst);
        assert!(tally.by_class.is_empty() && tally.worst.is_empty());
    }
}

#[test]
fn the_simulated_sweep_matches_the_models_over_a_spread_of_inputs() {
    // 1025 inputs over the whole range (both signs, every exponent), in three launches of
    // unequal size so the chunk arithmetic is exercised.
    let s = Sweep::spread(4_190_213, 400);
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
    ] {
        let e = sweep(&mut SimBackend::hopper(), s, &mut |_| {}).unwrap_err();
        assert!(matches!(e, SweepError::Invalid(_)), "{s:?}: {e}");
    }
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
    assert!(compare(base, step, &words).iter().all(|t| t.mismatches() == 0));
    let at = |i: usize, op: usize| i * WORDS_PER_INPUT + op;
    // ex2.approx.ftz: one result 1 ulp up, one 3 ulp down.
    words[at(10, 0)] += 1;
    words[at(20, 0)] -= 3;
    // rcp.approx: a NaN where a number belongs.
    words[at(30, 3)] = 0x7FC0_0000;
    let tallies = compare(base, step, &words);
    let ex2 = &tallies[0];
    assert_eq!((ex2.inputs, ex2.mismatches(), ex2.max_ulps), (u64::from(n), 2, 3));
    assert_eq!(
        ex2.ulp_histogram.iter().map(|(&d, &c)| (d, c)).collect::<Vec<_>>(),
        [(1, 1), (3, 1)]
    );
    assert_eq!(ex2.worst[0].ulps, 3, "worst first");
    assert_eq!(ex2.worst[0].x, sweep_input(base, step, 20));
    assert_eq!(ex2.by_class.get(&MismatchClass::Finite), Some(&2));
    assert_eq!(tallies[1].mismatches() + tallies[2].mismatches(), 0);
    let rcp = &tallies[3];
    assert_eq!(rcp.by_class.get(&MismatchClass::Nan), Some(&1));
    assert_eq!(rcp.worst[0].ulps, u64::MAX);
    assert!(rcp.ulp_histogram.is_empty(), "NaN mismatches have no distance");
}

#[test]
fn distances_and_classes_follow_the_float_line() {
    let one = 1f32.to_bits();
    assert_eq!(ulp_distance(0, 0x8000_0000), 0, "+0 and −0 coincide");
    assert_eq!(ulp_distance(one, one + 1), 1);
    assert_eq!(ulp_distance(1, 0x8000_0001), 2, "across zero");
    assert_eq!(ulp_distance(0x7F7F_FFFF, 0x7F80_0000), 1, "MAX to +inf");
    assert_eq!(classify(one, 0x7FC0_0001, 0x7FFF_FFFF), MismatchClass::NanPayload);
    assert_eq!(classify(one, 0, 0x8000_0000), MismatchClass::ZeroSign);
    assert_eq!(classify(one, 0x7F80_0000, 0x7F7F_FFFF), MismatchClass::Infinity);
    assert_eq!(classify(0x0000_0010, one, one + 1), MismatchClass::NearSubnormal);
    assert_eq!(classify(one, 0x0080_0001, 0x0080_0000), MismatchClass::NearSubnormal);
    assert_eq!(classify(one, one, one + 1), MismatchClass::Finite);
}
