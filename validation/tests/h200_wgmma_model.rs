//! The measured H200 wgmma accumulation (`corpus::h200_wgmma_k16`) against steps an H200
//! computed, where the exact sum rounded to nearest gives another f32; and the corpus's
//! layout operands, whose sums are exact, against the exact sum.

use moegen_validation::corpus::{WgmmaOperands, h200_wgmma_k16};

fn bf16s(bits: [u16; 16]) -> [f32; 16] {
    bits.map(|h| f32::from_bits(u32::from(h) << 16))
}

/// (a, b, c, d on the H200) from the 153 600-step measurement (docs/hopper.md).
mod recorded {
    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/tests/data/h200_wgmma_steps.rs"));
}
use recorded::RECORDED;

#[test]
fn the_model_gives_what_the_h200_gave() {
    for (a, b, c, d) in RECORDED {
        let (a, b) = (bf16s(a), bf16s(b));
        let got = h200_wgmma_k16(f32::from_bits(c), &a, &b);
        assert_eq!(got.to_bits(), d, "{got:e}");
        // The exact sum, rounded to nearest, is another f32: the step is not exact.
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>()
            + f64::from(f32::from_bits(c));
        assert_ne!((exact as f32).to_bits(), d);
    }
}

#[test]
fn exact_sums_come_out_exact() {
    let ops = WgmmaOperands::new();
    for m in (0..64).step_by(7) {
        for n in 0..32 {
            let mut acc = 0f32;
            let mut exact = 0f64;
            for j in 0..4 {
                let a: [f32; 16] = std::array::from_fn(|k| ops.weight(m, 16 * j + k));
                let b: [f32; 16] = std::array::from_fn(|k| ops.x[n * 64 + 16 * j + k]);
                acc = h200_wgmma_k16(acc, &a, &b);
                exact += a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>();
            }
            assert_eq!(acc, exact as f32, "row {m} token {n}");
        }
    }
}

/// The CPU reference's accumulation (`moegen_runtime::reference::wgmma_step`, what the
/// layer reference computes with) is the measured model: the recorded H200 steps, and
/// random steps against this crate's independent implementation.
#[test]
fn the_reference_accumulates_like_the_h200() {
    use moegen_runtime::reference::wgmma_step;
    for (a, b, c, d) in RECORDED {
        assert_eq!(wgmma_step(f32::from_bits(c), &a, &b).to_bits(), d);
    }
    let mut s: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    // A normal bf16 with exponent in ±24 (or, one time in eight, zero).
    let mut value = || -> u16 {
        let r = next();
        if r % 8 == 0 {
            return 0;
        }
        let exp = 127 - 24 + (r >> 8) % 49;
        ((r >> 16) as u16 & 0x8000) | ((exp as u16) << 7) | ((r >> 32) as u16 & 0x7F)
    };
    for step in 0..100_000 {
        let a: [u16; 16] = std::array::from_fn(|_| value());
        let b: [u16; 16] = std::array::from_fn(|_| value());
        let acc = if step % 3 == 0 { 0.0 } else { bf16s([value(); 16])[0] * 3.0 };
        let want = h200_wgmma_k16(acc, &bf16s(a), &bf16s(b));
        assert_eq!(wgmma_step(acc, &a, &b).to_bits(), want.to_bits(), "step {step}");
    }
}
