//! A GEMM1 epilogue step's inputs read as the element loop asks for them: the 64 (up, gate)
//! accumulator column pairs from TMEM in two 32-column halves, and a bias's 64 up and 64
//! gate values four at a time. A clamped SwiGLU or a bias keeps more values live per element
//! than the plain epilogue; with the whole step's 128 accumulators (and 128 biases) read up
//! front the epilogue's 168 registers spilled (docs/sm100-mxf8f6f4.md), so those epilogues
//! hold at most half a step's accumulators and one quad of biases at a time.

use super::epilogue::{STEP_COLS, tmem_load};
use crate::ptx::ops::{Access, LdRepeat, Memory, Tcgen05};
use crate::ptx::{KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// Columns per TMEM read of one half-step.
const HALF: usize = STEP_COLS as usize / 2;

/// One step's inputs, read on demand. [`StepInputs::finish`] ends the step: dropped
/// without it, a step that frees the tile's accumulator would never release it (the MMA
/// warp would wait forever), so dropping it unfinished panics at generation time.
#[must_use = "a step's inputs end with `finish`, which completes its reads and the release"]
pub(super) struct StepInputs<'a> {
    /// The step's first accumulator column (up; gate is `STEP_COLS` further).
    at: Reg,
    up: [Option<Reg>; 64],
    gate: [Option<Reg>; 64],
    /// The step's up and gate bias rows (64 f32 each), when the kernel has a bias.
    bias_at: Option<[Reg; 2]>,
    bias: [Option<(Reg, Reg)>; 64],
    /// Emitted once the step's last accumulator read has completed (the tile's TMEM release),
    /// when this step is the one that frees it.
    release: Option<&'a dyn Fn(&mut KernelBuilder)>,
}

impl<'a> StepInputs<'a> {
    /// Reads the first half of the step's accumulators (the loads of the second wait until
    /// an element of it is asked for).
    pub fn new(
        b: &mut KernelBuilder,
        at: Reg,
        bias_at: Option<[Reg; 2]>,
        release: Option<&'a dyn Fn(&mut KernelBuilder)>,
    ) -> Self {
        let mut s =
            StepInputs { at, up: [None; 64], gate: [None; 64], bias_at, bias: [None; 64], release };
        s.load_half(b, 0);
        s
    }

    fn load_half(&mut self, b: &mut KernelBuilder, half: usize) {
        let col = (half * HALF) as u32;
        let up = tmem_load::<HALF>(b, self.at, col, LdRepeat::X32);
        let gate = tmem_load::<HALF>(b, self.at, STEP_COLS + col, LdRepeat::X32);
        b.emit(Tcgen05::WaitLd, vec![]);
        for i in 0..HALF {
            self.up[half * HALF + i] = Some(up[i]);
            self.gate[half * HALF + i] = Some(gate[i]);
        }
        if half == 1
            && let Some(release) = self.release.take()
        {
            release(b);
        }
    }

    /// Element `i`'s (up, gate) accumulators.
    pub fn acc(&mut self, b: &mut KernelBuilder, i: usize) -> (Reg, Reg) {
        if self.up[i].is_none() {
            self.load_half(b, i / HALF);
        }
        match (self.up[i], self.gate[i]) {
            (Some(u), Some(g)) => (u, g),
            // `load_half` fills both halves' every element.
            _ => unreachable!("step input {i} not loaded"),
        }
    }

    /// Element `i`'s (up, gate) biases, when the kernel has a bias.
    pub fn bias(&mut self, b: &mut KernelBuilder, i: usize) -> Option<(Reg, Reg)> {
        let rows = self.bias_at?;
        if self.bias[i].is_none() {
            let q = i / 4;
            let [up, gate] = rows.map(|row| {
                let v = b.regs(RegClass::F32, 4);
                b.emit(
                    Memory::Ld(Access::vector(Space::Global, VecWidth::V4, Ty::F32)),
                    vec![Operand::regs(&v), Operand::Reg(row).at(16 * q as i64)],
                );
                v
            });
            for k in 0..4 {
                self.bias[4 * q + k] = Some((up[k], gate[k]));
            }
        }
        self.bias[i]
    }

    /// Reads whatever the element loop did not ask for, so the step always completes its
    /// accumulator reads (and the tile's release) before the next step.
    pub fn finish(mut self, b: &mut KernelBuilder) {
        if self.up[HALF].is_none() {
            self.load_half(b, 1);
        }
    }
}

impl Drop for StepInputs<'_> {
    fn drop(&mut self) {
        // Not while unwinding from another panic (that would abort).
        if !std::thread::panicking() {
            assert!(
                self.release.is_none() && self.up[HALF].is_some(),
                "StepInputs dropped before `finish`: the step's reads and release are incomplete"
            );
        }
    }
}
