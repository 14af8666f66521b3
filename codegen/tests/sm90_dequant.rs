//! The integer and bf16 steps of the Hopper dequantization (`kernels/sm90/dequant.rs`),
//! replayed on the CPU: every E2M1 code and every scale code gives the exact weight the CPU
//! reference uses, and the byte/nibble shuffling puts each code of a fragment word in its A
//! register half. (The H200 ran the PTX itself: docs/hopper.md.)

use moegen_dsl::formats::{e2m1_to_f32, e4m3_to_f32, ue8m0_to_f32};

/// `prmt.b32` in its default mode.
fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let pool = u64::from(a) | (u64::from(b) << 32);
    (0..4).fold(0, |acc, i| {
        let s = (sel >> (4 * i)) & 0xF;
        let byte = ((pool >> (8 * (s & 7))) & 0xFF) as u32;
        let byte = if s & 8 != 0 { if byte & 0x80 != 0 { 0xFF } else { 0 } } else { byte };
        acc | (byte << (8 * i))
    })
}

/// A bf16 bit pattern as f32 (exact, subnormals included).
fn bf16(bits: u32) -> f32 {
    f32::from_bits((bits & 0xFFFF) << 16)
}

/// The four A registers of a fragment word, before the ×2^126 and ×scale multiplies.
fn placed(w: u32) -> [u32; 4] {
    let ev = w & 0x0F0F_0F0F;
    let od = (w >> 4) & 0x0F0F_0F0F;
    std::array::from_fn(|k| {
        let k = k as u32;
        let r = prmt(ev, od, k | (0xF << 4) | ((4 + k) << 8) | (0xF << 12));
        r.wrapping_mul(0x1040) & 0x81C0_81C0
    })
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
            for (half, nib) in [(0, 2 * k), (1, 2 * k + 1)] {
                let code = ((x >> (4 * nib)) & 0xF) as u8;
                let v = f64::from(bf16(r >> (16 * half))) * two126;
                let want = f64::from(e2m1_to_f32(code));
                assert!(v == want && v.is_sign_negative() == want.is_sign_negative(), "{x:08x}");
            }
        }
    }
}

#[test]
fn scale_bits_times_the_bias_are_the_scale() {
    let two120 = f64::from(f32::from_bits(0x7B80_0000));
    for s in 0u32..0x7F {
        // NVFP4: UE4M3 at bf16 bits 4–10, × 2^120.
        let splat = prmt(s, 0, 4 << 4 | 4 << 12) << 4;
        assert_eq!(splat >> 16, splat & 0xFFFF, "both halves");
        assert_eq!(f64::from(bf16(splat)) * two120, f64::from(e4m3_to_f32(s as u8)), "{s:#x}");
    }
    for e in 0u32..0xFF {
        // MXFP4: UE8M0 in the bf16 exponent, code 0 as the subnormal 2^-127.
        let bits = (e << 7).max(0x40);
        assert_eq!(bf16(bits), ue8m0_to_f32(e as u8), "{e:#x}");
    }
}
