//! The hardware check of the simulator's MUFU models (docs/simulator.md, "Approximate
//! instructions"): the sweep kernel (`CorpusKernel::Mufu`) applies `ex2.approx` and
//! `rcp.approx`, ftz and not, to a range of f32 bit patterns on a backend, chunk by chunk,
//! and [`crate::mufu_tally`] judges every result against `moegen_sim`'s model. Over all 2^32
//! inputs on an H200 this proves the model, or measures the d that docs/reference.md turns
//! into the Fast recipe's tolerance.

use moegen_dsl::abi::mufu_sweep::{WORDS_PER_INPUT, sweep_input};
use moegen_dsl::abi::{CorpusKernel, KernelId};
use moegen_runtime::backend::{Backend, DevicePtr, KernelArg};
use moegen_runtime::device_ops::{DeviceOpError, find_kernel, run};
use moegen_runtime::launch::{Bindings, GridInputs};

use crate::mufu_tally::{OpTally, compare};

/// Most inputs per launch (16 GiB of results); also keeps the kernel's `i + stride` below
/// 2^32.
pub const MAX_CHUNK: u32 = 1 << 30;

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

    /// The `⌈2^32 / step⌉` inputs 0, step, 2·step, …: the whole range, each once.
    pub fn spread(step: u32, chunk: u32) -> Result<Sweep, SweepError> {
        if step == 0 {
            return Err(SweepError::Invalid("step 0 (≥ 1)".into()));
        }
        Ok(Sweep { base: 0, step, count: (1u64 << 32).div_ceil(u64::from(step)), chunk })
    }

    /// The launches: `(index of the first input, inputs)`, covering `0..count` in order.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, u64)> {
        let (count, chunk) = (self.count, u64::from(self.chunk.max(1)));
        (0..count.div_ceil(chunk)).map(move |j| (j * chunk, chunk.min(count - j * chunk)))
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
    if s.chunk == 0 || s.chunk > MAX_CHUNK || s.count == 0 || s.count > 1 << 32 || s.step == 0 {
        return Err(SweepError::Invalid(format!(
            "count {} (1 ..= 2^32), step {} (≥ 1) and chunk {} (1 ..= 2^30)",
            s.count, s.step, s.chunk
        )));
    }
    // Input i is base + i·step mod 2^32: distinct only while (count − 1)·step < 2^32.
    if (s.count - 1).saturating_mul(u64::from(s.step)) >= 1 << 32 {
        return Err(SweepError::Invalid(format!(
            "{} inputs at step {} wrap around and repeat",
            s.count, s.step
        )));
    }
    let k = find_kernel(&KernelId::Corpus(CorpusKernel::Mufu))?;
    let chunk = u64::from(s.chunk).min(s.count);
    let bytes = usize::try_from(chunk * (4 * WORDS_PER_INPUT) as u64)
        .map_err(|_| SweepError::Invalid(format!("chunk {chunk} does not fit in memory")))?;
    let out: DevicePtr = b.alloc(bytes).map_err(DeviceOpError::from)?;
    let mut total: Vec<OpTally> =
        moegen_dsl::abi::mufu_sweep::MufuOp::ALL.map(OpTally::new).to_vec();
    for (first, n) in s.chunks() {
        // first < count ≤ 2^32 and n ≤ chunk ≤ 2^30.
        let base = sweep_input(s.base, s.step, first as u32);
        let args = vec![
            KernelArg::Ptr(out),
            KernelArg::U32(base),
            KernelArg::U32(s.step),
            KernelArg::U32(n as u32),
        ];
        let grid = GridInputs { tokens: n, hidden: 1, ..GridInputs::default() };
        run(b, k, &Bindings::new().positional(args), &grid)?;
        let words: Vec<u32> = b
            .download(out, n as usize * 4 * WORDS_PER_INPUT)
            .map_err(DeviceOpError::from)?
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let tallies = compare(base, s.step, &words)
            .ok_or_else(|| SweepError::Invalid("a partial result row".into()))?;
        for (t, q) in total.iter_mut().zip(tallies) {
            t.merge(q);
        }
        log(first + n);
    }
    Ok(total)
}
