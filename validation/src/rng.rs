//! The synthetic inputs' generator: a xorshift64 stream, so every case, benchmark and SIMT
//! check draws the same numbers on every machine and run (a seed of 0 stays 0: callers
//! seed with a nonzero value).

/// A xorshift64 stream.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A roughly normal value (a sum of four uniforms), scaled to about a trained layer's
    /// spread.
    pub(crate) fn normal(&mut self) -> f32 {
        (0..4).map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).sum::<f32>() * 1.7
    }
}
