//! The hardware check of the simulator's MUFU models (docs/simulator.md, "Approximate
//! instructions"): the sweep kernel (`CorpusKernel::Mufu`) applies `ex2.approx` and
//! `rcp.approx`, ftz and not, to a range of f32 bit patterns on a backend, and every result
//! is compared bit for bit with `moegen_sim`'s model of that instruction. Over all 2^32
//! inputs on an H200 this proves the model (or measures by how many ulp it is off, which
//! docs/reference.md turns into the Fast recipe's tolerance).

use std::collections::BTreeMap;

use moegen_dsl::abi::mufu_sweep::{MufuOp, WORDS_PER_INPUT, sweep_input};
use moegen_dsl::abi::{CorpusKernel, KernelId};
use moegen_runtime::backend::{Backend, DevicePtr, KernelArg};
use moegen_runtime::device_ops::{DeviceOpError, find_kernel, run};
use moegen_runtime::launch::{Bindings, GridInputs};

/// Most inputs per launch (16 GiB of results).
pub const MAX_CHUNK: u32 = 1 << 30;

/// Mismatches kept per op, worst first.
pub const WORST_KEPT: usize = 20;

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
    /// The input or the model's result is subnormal or within one ulp of 2^-126 (the flush
    /// boundary).
    NearSubnormal,
    /// Two finite normal values.
    Finite,
}

fn near_subnormal(bits: u32) -> bool {
    let mag = bits & 0x7FFF_FFFF;
    // Subnormals, zero excluded, and the normals within one ulp of 2^-126.
    (mag != 0 && mag < 0x0080_0000) || mag == 0x0080_0000 || mag == 0x0080_0001
}

/// Classifies a mismatch of input `x` (bits), hardware `hw` and model `model`.
pub fn classify(x: u32, hw: u32, model: u32) -> MismatchClass {
    let (fh, fm) = (f32::from_bits(hw), f32::from_bits(model));
    if fh.is_nan() && fm.is_nan() {
        MismatchClass::NanPayload
    } else if fh.is_nan() || fm.is_nan() {
        MismatchClass::Nan
    } else if fh == 0.0 && fm == 0.0 {
        MismatchClass::ZeroSign
    } else if fh.is_infinite() || fm.is_infinite() {
        MismatchClass::Infinity
    } else if near_subnormal(x) || near_subnormal(model) {
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
    /// [`ulp_distance`] (`u64::MAX` when either is NaN).
    pub ulps: u64,
    /// Why.
    pub class: MismatchClass,
}

/// Everything measured for one op over the inputs swept so far.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OpTally {
    /// The PTX instruction.
    pub op: &'static str,
    /// Inputs compared.
    pub inputs: u64,
    /// Results equal to the model bit for bit.
    pub identical: u64,
    /// Mismatches by class.
    pub by_class: BTreeMap<MismatchClass, u64>,
    /// Mismatches by ulp distance (NaN mismatches excluded).
    pub ulp_histogram: BTreeMap<u64, u64>,
    /// The largest ulp distance of a non-NaN mismatch (0 when none).
    pub max_ulps: u64,
    /// The [`WORST_KEPT`] mismatches with the largest distance (NaN ones first), ties by
    /// input.
    pub worst: Vec<Mismatch>,
}

impl OpTally {
    fn new(op: MufuOp) -> Self {
        OpTally {
            op: op.ptx(),
            inputs: 0,
            identical: 0,
            by_class: BTreeMap::new(),
            ulp_histogram: BTreeMap::new(),
            max_ulps: 0,
            worst: Vec::new(),
        }
    }

    /// Mismatches of any class.
    pub fn mismatches(&self) -> u64 {
        self.inputs - self.identical
    }

    fn record(&mut self, x: u32, hw: u32, model: u32) {
        self.inputs += 1;
        if hw == model {
            self.identical += 1;
            return;
        }
        let class = classify(x, hw, model);
        let nan = f32::from_bits(hw).is_nan() || f32::from_bits(model).is_nan();
        let ulps = if nan { u64::MAX } else { ulp_distance(hw, model) };
        *self.by_class.entry(class).or_default() += 1;
        if !nan {
            *self.ulp_histogram.entry(ulps).or_default() += 1;
            self.max_ulps = self.max_ulps.max(ulps);
        }
        self.keep(Mismatch { x, hw, model, ulps, class });
    }

    fn keep(&mut self, m: Mismatch) {
        self.worst.push(m);
        self.worst.sort_by(|a, b| b.ulps.cmp(&a.ulps).then(a.x.cmp(&b.x)));
        self.worst.truncate(WORST_KEPT);
    }

    fn merge(&mut self, other: OpTally) {
        self.inputs += other.inputs;
        self.identical += other.identical;
        for (c, n) in other.by_class {
            *self.by_class.entry(c).or_default() += n;
        }
        for (d, n) in other.ulp_histogram {
            *self.ulp_histogram.entry(d).or_default() += n;
        }
        self.max_ulps = self.max_ulps.max(other.max_ulps);
        for m in other.worst {
            self.keep(m);
        }
    }
}

/// Compares the sweep's output `words` (as the kernel wrote them for inputs
/// `sweep_input(base, step, i)`) with the models, on every core.
pub fn compare(base: u32, step: u32, words: &[u32]) -> Vec<OpTally> {
    let inputs = words.len() / WORDS_PER_INPUT;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = inputs.div_ceil(workers).max(1);
    let partials: Vec<Vec<OpTally>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..inputs)
            .step_by(per)
            .map(|start| {
                let end = (start + per).min(inputs);
                s.spawn(move || {
                    let mut t: Vec<OpTally> = MufuOp::ALL.map(OpTally::new).to_vec();
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
    let mut total: Vec<OpTally> = MufuOp::ALL.map(OpTally::new).to_vec();
    for p in partials {
        for (t, q) in total.iter_mut().zip(p) {
            t.merge(q);
        }
    }
    total
}

/// Which inputs to sweep: `count` inputs `base + i·step`, in launches of at most `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Sweep {
    /// Bits of input 0.
    pub base: u32,
    /// Stride between inputs (wrapping).
    pub step: u32,
    /// Inputs (up to 2^32).
    pub count: u64,
    /// Inputs per launch.
    pub chunk: u32,
}

impl Sweep {
    /// Every f32 bit pattern once, in launches of 2^28 (4 GiB of results each).
    pub const EXHAUSTIVE: Sweep = Sweep { base: 0, step: 1, count: 1 << 32, chunk: 1 << 28 };

    /// `⌈2^32 / step⌉` inputs spread over the whole range, each once (step ≥ 1).
    pub fn spread(step: u32, chunk: u32) -> Sweep {
        let step = step.max(1);
        Sweep { base: 0, step, count: (1u64 << 32).div_ceil(u64::from(step)), chunk }
    }
}

/// Errors of a sweep.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The sweep's own parameters.
    #[error("invalid MUFU sweep: {0}")]
    Invalid(String),
    /// The backend.
    #[error(transparent)]
    Device(#[from] DeviceOpError),
}

/// Runs the sweep on `b`, calling `log` after each launch with the inputs done so far.
pub fn sweep(
    b: &mut dyn Backend,
    s: Sweep,
    log: &mut dyn FnMut(u64),
) -> Result<Vec<OpTally>, SweepError> {
    // A chunk of at most 2^30 inputs keeps the kernel's `i + stride` below 2^32.
    if s.chunk == 0 || s.chunk > MAX_CHUNK || s.count == 0 || s.count > 1 << 32 || s.step == 0 {
        return Err(SweepError::Invalid(format!(
            "count {} (1 ..= 2^32), step {} (≥ 1) and chunk {} (1 ..= 2^30)",
            s.count, s.step, s.chunk
        )));
    }
    let k = find_kernel(&KernelId::Corpus(CorpusKernel::Mufu))?;
    let chunk = u64::from(s.chunk).min(s.count);
    let bytes = usize::try_from(chunk * (4 * WORDS_PER_INPUT) as u64)
        .map_err(|_| SweepError::Invalid(format!("chunk {chunk} does not fit in memory")))?;
    let out: DevicePtr = b.alloc(bytes).map_err(DeviceOpError::from)?;
    let mut total: Vec<OpTally> = MufuOp::ALL.map(OpTally::new).to_vec();
    let mut done = 0u64;
    while done < s.count {
        let n = (s.count - done).min(chunk);
        // `done` < 2^32 here, and the chunk's first input is input `done` of the sweep.
        let first = done as u32;
        let base = sweep_input(s.base, s.step, first);
        let args = vec![
            KernelArg::Ptr(out),
            KernelArg::U32(base),
            KernelArg::U32(s.step),
            KernelArg::U32(n as u32),
        ];
        let grid = GridInputs { tokens: n, hidden: 1, ..GridInputs::default() };
        run(b, k, &Bindings::new().positional(args), &grid)?;
        let raw = b.download(out, n as usize * 4 * WORDS_PER_INPUT).map_err(DeviceOpError::from)?;
        let words: Vec<u32> =
            raw.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        for (t, q) in total.iter_mut().zip(compare(base, s.step, &words)) {
            t.merge(q);
        }
        done += n;
        log(done);
    }
    Ok(total)
}
