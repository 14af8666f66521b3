//! The integer and bf16 steps of the Hopper dequantization (`kernels/sm90/dequant.rs`),
//! replayed on the CPU: every E2M1 code and every scale code gives the exact weight the CPU
//! reference uses, and the placement puts value 2k of a fragment word in the low half of A
//! register k and value 2k + 1 in its high half (`abi::sm90_weights::VALUE_BITS`).
//! (An H100 ran the PTX itself, the corpus and the layer: docs/validation.md, 2026-12-06.)

use moegen_dsl::abi::sm90_weights::{VALUE_BITS, code_at, place_code};
use moegen_dsl::formats::{e2m1_to_f32, e4m3_to_f32, ue8m0_to_f32};

/// A bf16 bit pattern as f32 (exact, subnormals included).
fn bf16(bits: u32) -> f32 {
    f32::from_bits((bits & 0xFFFF) << 16)
}

/// The four A registers of a fragment word, before the multiplies: as the kernel places
/// them (registers 0, 1: `shf.r.wrap` by 2, 5 and `and`; registers 2, 3: `and`, `mul.lo`
/// by 0x42, 9, `and`).
fn placed(w: u32) -> [u32; 4] {
    let keep = 0x81C0_81C0;
    [
        w.rotate_right(2) & keep,
        w.rotate_right(5) & keep,
        (w & 0x4045_4045).wrapping_mul(0x42) & keep,
        (w & 0x80A8_80A8).wrapping_mul(9) & keep,
    ]
}

#[test]
fn every_code_lands_in_its_half_as_the_e2m1_value_times_2_pow_minus_126() {
    let two126 = f64::from(f32::from_bits(0x7E80_0000));
    let mut x = 0x1234_5678u32;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let regs = placed(x);
        for (k, &r) in regs.iter().enumerate() {
            for half in 0..2 {
                // Value 2k + half of the word, at the bits the ABI gives it.
                let code = code_at(x, VALUE_BITS[2 * k + half]);
                let v = f64::from(bf16(r >> (16 * half))) * two126;
                let want = f64::from(e2m1_to_f32(code));
                assert!(v == want && v.is_sign_negative() == want.is_sign_negative(), "{x:08x}");
            }
        }
    }
    // Every code in every position, the other values zero and all ones.
    for (i, &bits) in VALUE_BITS.iter().enumerate() {
        for code in 0u8..16 {
            for rest in [0u32, u32::MAX] {
                let others = VALUE_BITS.iter().enumerate().filter(|&(o, _)| o != i);
                let base = others.fold(0, |w, (_, &b)| place_code(w, b, (rest & 0xF) as u8));
                let w = place_code(base, bits, code);
                let r = placed(w)[i / 2] >> (16 * (i % 2));
                assert_eq!(f64::from(bf16(r)) * two126, f64::from(e2m1_to_f32(code)), "{i} {code}");
            }
        }
    }
}

/// A word with `code` in byte `j` and the other bytes `fill`.
fn word(code: u32, j: u32, fill: u32) -> u32 {
    let mask = 0xFFu32 << (8 * j);
    (fill & !mask) | (code << (8 * j))
}

#[test]
fn nvfp4_scale_words_become_the_four_steps_scales() {
    let two120 = f64::from(f32::from_bits(0x7B80_0000));
    // Bytes 0, 2 from `(s << 4) & 0x07F007F0`, bytes 1, 3 from `(s >> 4) & 0x07F007F0`,
    // each half × 2^120; whatever the neighbouring bytes hold (sign bits included).
    for fill in [0u32, 0x7F7F_7F7F, 0xFFFF_FFFF, 0x8037_6A15] {
        // 0x7F is E4M3 NaN, which the runtime refuses as a scale.
        for code in 0u32..0x7F {
            for j in 0..4 {
                let s = word(code, j, fill);
                let even = (s << 4) & 0x07F0_07F0;
                let odd = (s >> 4) & 0x07F0_07F0;
                let pair = if j % 2 == 0 { even } else { odd };
                let half = pair >> (16 * (j / 2));
                let got = f64::from(bf16(half)) * two120;
                assert_eq!(got, f64::from(e4m3_to_f32(code as u8)), "{code:#x} in byte {j}");
            }
        }
    }
}

#[test]
fn mxfp4_scale_words_become_the_two_blocks_factors() {
    // Bytes 0 and 2 (steps 0–1 and 2–3: one 32-block each) are bf16 exponent fields
    // (1‥254): `(s << 7) & 0x7F807F80` makes each the factor 2^(field − 127), whatever the
    // neighbouring bytes hold.
    for fill in [0u32, 0xFFFF_FFFF, 0x1234_5678] {
        for field in 1u32..=254 {
            for j in [0, 2] {
                let s = word(field, j, fill);
                let pair = (s << 7) & 0x7F80_7F80;
                let half = pair >> (16 * (j / 2));
                let want = (2f64).powi(field as i32 - 127);
                assert_eq!(f64::from(bf16(half)), want, "{field} in byte {j}");
            }
        }
    }
}

/// `mul.rn.bf16x2`'s exact product, where it is a bf16 (the only case the runtime lets
/// reach the kernels).
fn exact_bf16_product(a: f64, b: f64) -> Option<f64> {
    let p = a * b;
    let bits = (p as f32).to_bits();
    let rounded = f64::from(f32::from_bits(bits & 0xFFFF_0000));
    (rounded == p && (p as f32) as f64 == p).then_some(p)
}

#[test]
fn mxfp4_one_multiply_gives_e2m1_times_scale_for_every_unshifted_code() {
    // Unshifted matrices (every code ≤ 128) store field = code + 126, so the placed bits
    // times the factor are e2m1 · 2^(code − 127): the weight itself, for every code the
    // runtime accepts unshifted.
    let two126 = (2f64).powi(126);
    for code in 0u8..=128 {
        let factor = (2f64).powi(i32::from(code) + 126 - 127);
        for c in 0u8..16 {
            let placed = f64::from(e2m1_to_f32(c)) / two126;
            let want = f64::from(e2m1_to_f32(c)) * f64::from(ue8m0_to_f32(code));
            assert_eq!(exact_bf16_product(placed, factor), Some(want), "code {code}, e2m1 {c:#x}");
        }
    }
}
