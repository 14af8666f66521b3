//! Judging MUFU results against the simulator's models: each mismatch is classified, and
//! distances, histograms and examples are kept per class, because a flush disagreement
//! near 2^-126 or an infinity is millions of "ulp" from the model and says nothing about
//! the rounding of ordinary values, which is what the Fast recipe's tolerance needs
//! (docs/reference.md: d, the largest ulp distance between finite normal results).

use std::collections::BTreeMap;

use moegen_dsl::abi::mufu_sweep::{MufuOp, WORDS_PER_INPUT, sweep_input};

/// Examples kept per class, worst first.
pub const WORST_KEPT: usize = 20;

/// The largest distance d between the hardware's and the model's finite normal results for
/// which docs/reference.md's tolerance is instantiated: the PTX ISA's bounds, d_e = 2 for
/// `ex2.approx` and d_r = 1 for `rcp.approx`, which the H200 meets exactly (2026-12-01).
pub const fn bound_ulps(op: MufuOp) -> u64 {
    match op {
        MufuOp::Ex2ApproxFtz | MufuOp::Ex2Approx => 2,
        MufuOp::RcpApproxFtz | MufuOp::RcpApprox => 1,
    }
}

/// The simulator's model of `op`.
pub fn model(op: MufuOp) -> fn(f32) -> f32 {
    match op {
        MufuOp::Ex2ApproxFtz => moegen_sim::ex2_approx_ftz_model,
        MufuOp::Ex2Approx => moegen_sim::ex2_approx_model,
        MufuOp::RcpApproxFtz => moegen_sim::rcp_approx_ftz_model,
        MufuOp::RcpApprox => moegen_sim::rcp_approx_model,
    }
}

/// A sign-magnitude f32 pattern as a point on the integer line, so that neighbouring
/// floats are one apart and +0 and −0 coincide.
fn ordinal(bits: u32) -> i64 {
    if bits < 0x8000_0000 { i64::from(bits) } else { -i64::from(bits & 0x7FFF_FFFF) }
}

/// Distance in ulp between two f32 bit patterns (0 for +0 vs −0).
pub fn ulp_distance(a: u32, b: u32) -> u64 {
    ordinal(a).abs_diff(ordinal(b))
}

/// Why a result differs from the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum MismatchClass {
    /// Both NaN, different payloads.
    NanPayload,
    /// One NaN, the other not.
    Nan,
    /// Both zero, opposite signs.
    ZeroSign,
    /// Either is infinite (overflow or a special input).
    Infinity,
    /// Both results below 2^-125 in magnitude (subnormal, zero or the smallest normals): a
    /// flush decision, which the tolerance's absolute term covers.
    NearSubnormal,
    /// Any other pair of finite values: the rounding d is about.
    Finite,
}

/// Classifies a mismatch of hardware result `hw` against the model's `model`.
pub fn classify(hw: u32, model: u32) -> MismatchClass {
    let (fh, fm) = (f32::from_bits(hw), f32::from_bits(model));
    let tiny = |v: f32| v.abs() < 2f32.powi(-125);
    if fh.is_nan() && fm.is_nan() {
        MismatchClass::NanPayload
    } else if fh.is_nan() || fm.is_nan() {
        MismatchClass::Nan
    } else if fh == 0.0 && fm == 0.0 {
        MismatchClass::ZeroSign
    } else if fh.is_infinite() || fm.is_infinite() {
        MismatchClass::Infinity
    } else if tiny(fh) && tiny(fm) {
        MismatchClass::NearSubnormal
    } else {
        MismatchClass::Finite
    }
}

/// One differing result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// Input bits.
    pub x: u32,
    /// The backend's result bits.
    pub hw: u32,
    /// The model's result bits.
    pub model: u32,
    /// [`ulp_distance`]; `None` when either is NaN.
    pub ulps: Option<u64>,
}

/// The mismatches of one class.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassTally {
    /// How many.
    pub count: u64,
    /// Count by ulp distance (empty for the NaN classes).
    pub ulp_histogram: BTreeMap<u64, u64>,
    /// The largest distance (`None` when none or NaN).
    pub max_ulps: Option<u64>,
    /// The [`WORST_KEPT`] with the largest distance, ties by input.
    pub worst: Vec<Mismatch>,
}

impl ClassTally {
    fn add(&mut self, m: Mismatch) {
        self.count += 1;
        if let Some(d) = m.ulps {
            *self.ulp_histogram.entry(d).or_default() += 1;
            self.max_ulps = self.max_ulps.max(Some(d));
        }
        self.keep(m);
    }

    fn keep(&mut self, m: Mismatch) {
        let rank = |m: &Mismatch| (std::cmp::Reverse(m.ulps), m.x);
        if self.worst.len() == WORST_KEPT && self.worst.last().is_some_and(|w| rank(w) <= rank(&m))
        {
            return;
        }
        self.worst.push(m);
        self.worst.sort_by_key(rank);
        self.worst.truncate(WORST_KEPT);
    }

    fn merge(&mut self, other: ClassTally) {
        self.count += other.count;
        for (d, n) in other.ulp_histogram {
            *self.ulp_histogram.entry(d).or_default() += n;
        }
        self.max_ulps = self.max_ulps.max(other.max_ulps);
        for m in other.worst {
            self.keep(m);
        }
    }
}

/// Everything measured for one op over the inputs compared so far.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OpTally {
    /// The PTX instruction.
    pub op: &'static str,
    /// The largest finite distance the tolerance allows ([`bound_ulps`]).
    pub bound_ulps: u64,
    /// Inputs compared.
    pub inputs: u64,
    /// Results equal to the model bit for bit.
    pub identical: u64,
    /// Mismatches by class.
    pub classes: BTreeMap<MismatchClass, ClassTally>,
}

impl OpTally {
    /// An empty tally for `op`.
    pub fn new(op: MufuOp) -> Self {
        OpTally {
            op: op.ptx(),
            bound_ulps: bound_ulps(op),
            inputs: 0,
            identical: 0,
            classes: BTreeMap::new(),
        }
    }

    /// Mismatches of any class.
    pub fn mismatches(&self) -> u64 {
        self.inputs - self.identical
    }

    /// d: the largest distance between finite normal results (0 when they all agree).
    pub fn finite_ulps(&self) -> u64 {
        self.classes.get(&MismatchClass::Finite).and_then(|c| c.max_ulps).unwrap_or(0)
    }

    /// Every result equals the model's.
    pub fn bit_exact(&self) -> bool {
        self.identical == self.inputs
    }

    /// The hardware stays where docs/reference.md's tolerance assumes it does: finite
    /// results within [`Self::bound_ulps`] of the model, flush decisions only between values
    /// below 2^-125, NaN payloads free, and no disagreement about NaN, infinities or the sign
    /// of zero.
    pub fn within_bound(&self) -> bool {
        let count = |c| self.classes.get(&c).map_or(0, |t| t.count);
        self.finite_ulps() <= self.bound_ulps
            && count(MismatchClass::Nan) + count(MismatchClass::Infinity) == 0
            && count(MismatchClass::ZeroSign) == 0
    }

    fn record(&mut self, x: u32, hw: u32, model: u32) {
        self.inputs += 1;
        if hw == model {
            self.identical += 1;
            return;
        }
        let nan = f32::from_bits(hw).is_nan() || f32::from_bits(model).is_nan();
        let ulps = (!nan).then(|| ulp_distance(hw, model));
        self.classes.entry(classify(hw, model)).or_default().add(Mismatch { x, hw, model, ulps });
    }

    /// Adds `other`'s counts to this tally.
    pub fn merge(&mut self, other: OpTally) {
        self.inputs += other.inputs;
        self.identical += other.identical;
        for (c, t) in other.classes {
            self.classes.entry(c).or_default().merge(t);
        }
    }
}

/// Compares the sweep's output `words` (as the kernel writes them for inputs
/// `sweep_input(base, step, i)`, [`WORDS_PER_INPUT`] per input) with the models, on every
/// core. `None` when `words` is not a whole number of inputs.
pub fn compare(base: u32, step: u32, words: &[u32]) -> Option<Vec<OpTally>> {
    if !words.len().is_multiple_of(WORDS_PER_INPUT) {
        return None;
    }
    let inputs = words.len() / WORDS_PER_INPUT;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = inputs.div_ceil(workers).max(1);
    let fresh = || MufuOp::ALL.map(OpTally::new).to_vec();
    let partials: Vec<Vec<OpTally>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..inputs)
            .step_by(per)
            .map(|start| {
                let end = (start + per).min(inputs);
                s.spawn(move || {
                    let mut t = fresh();
                    for i in start..end {
                        let x = sweep_input(base, step, i as u32);
                        let row = &words[i * WORDS_PER_INPUT..(i + 1) * WORDS_PER_INPUT];
                        for ((tally, &op), &hw) in t.iter_mut().zip(&MufuOp::ALL).zip(row) {
                            tally.record(x, hw, model(op)(f32::from_bits(x)).to_bits());
                        }
                    }
                    t
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a comparison worker panicked")).collect()
    });
    let mut total = fresh();
    for p in partials {
        for (t, q) in total.iter_mut().zip(p) {
            t.merge(q);
        }
    }
    Some(total)
}
