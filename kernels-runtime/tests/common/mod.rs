//! Helpers shared by moegen-runtime's integration tests.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

/// A deterministic xorshift64 generator (no RNG crate needed for reproducible data).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Roughly normal: a scaled sum of four uniforms.
    pub fn normal(&mut self) -> f32 {
        (0..4).map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).sum::<f32>() * 1.7
    }
}
