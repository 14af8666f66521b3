//! Two implementations, one answer: the simulator's minifloat conversions
//! (`moegen_sim::minifloat`, bit arithmetic on the encodings) against moegen-dsl's
//! (`moegen_dsl::formats`, value tables; what the quantizers and the CPU reference use, and
//! what `cuda_header_oracle` holds to NVIDIA's host emulation). The simulator judges kernels
//! written against the DSL's formats, so it has its own; this test is where the two meet.
//!
//! Decodes: every code of E2M1 (16), E4M3, UE4M3 and UE8M0 (256 each), and the f16 result
//! of `cvt.rn.f16x2.e4m3x2`.
//!
//! Encodes (`cvt.rn.satfinite.{e2m1x2,e4m3x2}.f32`, `cvt.{rz,rp}{.satfinite}.ue8m0x2.f32`):
//! all 2^32 f32 inputs take minutes on a CI machine, so the inputs are chosen by binade
//! (sign and f32 exponent field):
//! - **exhaustively**, every mantissa of every binade holding a rounding decision of the
//!   format: for E2M1 the binades from 2^-3 (half the smallest subnormal, 0.25, is a tie to
//!   0) to 2^3 (5, the last midpoint, and saturation above it); for E4M3 from 2^-11 (2^-10,
//!   half the smallest subnormal) to 2^9 (464, the midpoint next to the NaN code); for UE8M0
//!   the subnormals (where `.rp` decides at 2^-127), the binade of 1 and the top binade
//!   (where `.rp` overflows); E2M1's binades lie inside E4M3's, so 2 · 24 binades of 2^23
//!   inputs, 403 M in all;
//! - in every other binade the PTX ISA's answer is the same for the whole binade (±0 below
//!   the first decision, ±max above the last, and UE8M0's power of two for every mantissa
//!   but zero), so a disagreement there could only come from reading mantissa bits the
//!   rounding does not depend on: those binades get the mantissas 0, 1, 2, the last two,
//!   every multiple of 2^19 (the finest decision spacing any of these formats has in any
//!   binade) and its neighbours, and 64 pseudo-random ones;
//! - NaNs (signalling and quiet, both signs) and infinities are among them.
//!
//! `every_f32_input` (ignored; `cargo test -p moegen-tests --test sim_formats_agree --
//! --ignored`) runs all 2^32 inputs on all cores.

use std::process::Command;
use std::sync::Mutex;

use moegen_dsl::formats as dsl;
use moegen_sim::minifloat as sim;

/// The f32 value of f16 bits that are zero or normal (all an E4M3 decode gives), NaN else.
fn f16_value(h: u16) -> f32 {
    let (e, m) = (i32::from((h >> 10) & 0x1F), f32::from(h & 0x3FF));
    let v = match e {
        0 if m == 0.0 => 0.0,
        1..=30 => (1024.0 + m) * 2f32.powi(e - 25),
        _ => f32::NAN,
    };
    if h & 0x8000 != 0 { -v } else { v }
}

/// Equal as values: bitwise, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_code_decodes_to_the_same_value() {
    for code in 0..16u8 {
        let want = dsl::e2m1_to_f32(code);
        assert!(same(sim::e2m1_to_f32(code), want), "E2M1 {code:#x}");
        assert_eq!(sim::e2m1_twice(code) as f32 / 2.0, want, "E2M1 {code:#x} as 2·value");
    }
    for code in 0..=255u8 {
        let want = dsl::e4m3_to_f32(code);
        assert!(same(sim::e4m3_to_f32(code), want), "E4M3 {code:#04x}");
        // The MMA's integer form: ±0 are the same scale.
        let scale = sim::ue4m3_times_512(code).map_or(f32::NAN, |v| v as f32 / 512.0);
        assert!(scale == want || (scale.is_nan() && want.is_nan()), "UE4M3 {code:#04x}");
        let h = sim::e4m3_to_f16_bits(code);
        if want.is_nan() {
            assert_eq!(h, 0x7FFF, "cvt.rn.f16x2.e4m3x2 of NaN {code:#04x}");
        } else {
            assert!(same(f16_value(h), want), "cvt.rn.f16x2.e4m3x2 of {code:#04x}: {h:#06x}");
        }
        assert!(same(sim::ue8m0_to_f32(code), dsl::ue8m0_to_f32(code)), "UE8M0 {code:#04x}");
    }
}

/// The simulator's and moegen-dsl's encodings of `x` in the class `which`: E2M1 and E4M3,
/// or UE8M0 rz/rp with and without satfinite.
fn encodings(x: f32, which: Which) -> [[u8; 4]; 2] {
    use dsl::Ue8m0Rounding::{TowardPosInf, TowardZero};
    use sim::Ue8m0Rounding::{Rp, Rz};
    match which {
        Which::Minifloats => [
            [sim::f32_to_e2m1_rn_satfinite(x), sim::f32_to_e4m3_rn_satfinite(x), 0, 0],
            [dsl::f32_to_e2m1(x), dsl::f32_to_e4m3(x), 0, 0],
        ],
        Which::Ue8m0 => [
            [
                sim::f32_to_ue8m0(x, Rz, true),
                sim::f32_to_ue8m0(x, Rp, true),
                sim::f32_to_ue8m0(x, Rz, false),
                sim::f32_to_ue8m0(x, Rp, false),
            ],
            [
                dsl::f32_to_ue8m0(x, TowardZero, true),
                dsl::f32_to_ue8m0(x, TowardPosInf, true),
                dsl::f32_to_ue8m0(x, TowardZero, false),
                dsl::f32_to_ue8m0(x, TowardPosInf, false),
            ],
        ],
    }
}

/// The two classes of encodings.
#[derive(Clone, Copy)]
enum Which {
    Minifloats,
    Ue8m0,
}

/// Compares the encodings of the given f32 bit patterns on all cores; returns how many
/// differ and the first few.
fn compare(inputs: Vec<(u32, Which)>, mantissas_per_input: u32) -> (u64, Vec<String>) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let found = Mutex::new((0u64, Vec::new()));
    let chunk = inputs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for part in inputs.chunks(chunk) {
            let found = &found;
            s.spawn(move || {
                let (mut count, mut first) = (0u64, Vec::new());
                for &(base, which) in part {
                    for m in 0..mantissas_per_input {
                        let bits = base | m;
                        let [ours, theirs] = encodings(f32::from_bits(bits), which);
                        if ours != theirs {
                            count += 1;
                            if first.len() < 10 {
                                first.push(format!("{bits:#010x}: sim {ours:x?}, dsl {theirs:x?}"));
                            }
                        }
                    }
                }
                let mut f = found.lock().unwrap();
                f.0 += count;
                f.1.extend(first);
            });
        }
    });
    let (count, mut first) = found.into_inner().unwrap();
    first.truncate(10);
    (count, first)
}

fn dense_binades() -> Vec<(u32, Which)> {
    let mut fields: Vec<(u32, Which)> = Vec::new();
    // E2M1: the binades 2^-3 ..= 2^3 (fields 124..=130); E4M3: 2^-11 ..= 2^9 (116..=136).
    for field in 116..=136u32 {
        fields.push((field, Which::Minifloats));
    }
    for field in [0u32, 127, 254] {
        fields.push((field, Which::Ue8m0));
    }
    // One unit of work per sign, binade and 2^16 mantissas, to spread over threads.
    let mut out = Vec::new();
    for (field, which) in fields {
        for sign in [0u32, 1] {
            for hi in 0..(1u32 << 7) {
                out.push(((sign << 31) | (field << 23) | (hi << 16), which));
            }
        }
    }
    out
}

fn sampled_mantissas() -> Vec<u32> {
    let mut m = vec![0, 1, 2, 0x7F_FFFE, 0x7F_FFFF];
    for k in 0..16u32 {
        let p = k << 19;
        m.extend([p, p + 1, p.wrapping_sub(1) & 0x7F_FFFF, p | 0x4_0000]);
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m.push((x as u32) & 0x7F_FFFF);
    }
    m
}

#[test]
fn encodings_agree_on_every_binade() {
    let mut sampled = Vec::new();
    for sign in [0u32, 1] {
        for field in 0..=255u32 {
            for m in sampled_mantissas() {
                let bits = (sign << 31) | (field << 23) | m;
                sampled.extend([(bits, Which::Minifloats), (bits, Which::Ue8m0)]);
            }
        }
    }
    let (n_sampled, first_sampled) = compare(sampled, 1);
    assert_eq!(n_sampled, 0, "{first_sampled:#?}");
    let (n_dense, first_dense) = compare(dense_binades(), 1 << 16);
    assert_eq!(n_dense, 0, "{first_dense:#?}");
}

#[test]
#[ignore = "all 2^32 inputs: minutes on a CI machine"]
fn every_f32_input() {
    let units: Vec<(u32, Which)> = (0..1u32 << 16)
        .flat_map(|hi| [(hi << 16, Which::Minifloats), (hi << 16, Which::Ue8m0)])
        .collect();
    let (count, first) = compare(units, 1 << 16);
    assert_eq!(count, 0, "{first:#?}");
}

/// The simulator is the independent judge: no moegen crate below it.
#[test]
fn the_simulator_depends_on_no_moegen_crate() {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--offline", "--prefix", "none", "--format", "{p}", "-p", "moegen-sim"])
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let ours: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| c.starts_with("moegen-"))
        .collect();
    assert!(ours.iter().all(|&c| c == "moegen-sim"), "{ours:?}");
}
