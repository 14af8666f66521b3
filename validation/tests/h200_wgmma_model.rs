//! The measured H200 wgmma accumulation (`corpus::h200_wgmma_k16`) against steps an H200
//! computed, where the exact sum rounded to nearest gives another f32; and the corpus's
//! layout operands, whose sums are exact, against the exact sum.

use moegen_validation::corpus::{WgmmaOperands, h200_wgmma_k16};

fn bf16s(bits: [u16; 16]) -> [f32; 16] {
    bits.map(|h| f32::from_bits(u32::from(h) << 16))
}

/// (a, b, c, d on the H200) from the 153 600-step measurement (docs/hopper.md).
const RECORDED: [([u16; 16], [u16; 16], u32, u32); 3] = [
    (
        [
            0x439C, 0x3BF7, 0x3D93, 0x3E78, 0xBB81, 0x4005, 0xC2CF, 0x42C5, 0xBD42, 0x3F2F, 0xC150,
            0xBEC2, 0x3D20, 0x4081, 0xC3F4, 0xC2A2,
        ],
        [
            0xC1C1, 0x3BB4, 0xBE7D, 0xC361, 0x4299, 0xBC09, 0x3CBA, 0x3D48, 0xC1FB, 0xC3D4, 0x4214,
            0x3C32, 0x4156, 0xBE62, 0x439F, 0x3C71,
        ],
        0x0000_0000,
        0xC81F_B392,
    ),
    (
        [
            0x439C, 0x3BF7, 0x3D93, 0x3E78, 0xBB81, 0x4005, 0xC2CF, 0x42C5, 0xBD42, 0x3F2F, 0xC150,
            0xBEC2, 0x3D20, 0x4081, 0xC3F4, 0xC2A2,
        ],
        [
            0xBDB4, 0x3CB2, 0x3CBD, 0xC2E2, 0x4115, 0xBE78, 0x3E96, 0xBE33, 0x4331, 0x3CF5, 0x3FAE,
            0xBE63, 0x3DAA, 0x3E09, 0xC183, 0x42DD,
        ],
        0x0000_0000,
        0xC487_F8D6,
    ),
    (
        [
            0x439C, 0x3BF7, 0x3D93, 0x3E78, 0xBB81, 0x4005, 0xC2CF, 0x42C5, 0xBD42, 0x3F2F, 0xC150,
            0xBEC2, 0x3D20, 0x4081, 0xC3F4, 0xC2A2,
        ],
        [
            0xBDEF, 0x3F41, 0xBE97, 0xBCA0, 0x40C9, 0x3DCA, 0xC20D, 0x4149, 0x3CCD, 0xBF8C, 0x3FDD,
            0x401C, 0xBE1F, 0x424C, 0x3FCD, 0xBD43,
        ],
        0xB7A4_210F,
        0x4584_EA5B,
    ),
];

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
