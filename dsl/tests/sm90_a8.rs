//! The A8 weight layout (`abi::sm90_weights::a8`): every value of a matrix has its own
//! magnitude and sign bits inside its tile, the words a thread loads hold exactly its
//! `wgmma…k32` A fragment, and the kernel's table is |e2m1| · 2^(c − 6) in E4M3.

use std::collections::HashSet;

use moegen_dsl::abi::sm90_weights::a8;
use moegen_dsl::formats::{e2m1_to_f32, e4m3_to_f32};

#[test]
fn table_is_e2m1_times_power_of_two_in_e4m3() {
    for c in a8::MIN_CODE..=a8::MAX_CODE {
        for m in 0u8..8 {
            let byte = a8::table_byte(c, m);
            assert_eq!(byte & 0x80, 0, "c {c} m {m}: the table is unsigned");
            let want = e2m1_to_f32(m) * 2f32.powi(i32::from(c) - 6);
            assert_eq!(e4m3_to_f32(byte), want, "c {c} m {m}: byte {byte:#04x}");
            // A set sign bit makes it the negative value (the kernel ORs the code's sign).
            assert_eq!(e4m3_to_f32(byte | 0x80), -want, "c {c} m {m}");
        }
    }
    // Outside 1..=12 the multiply-add tables are wrong (subnormal or past 448): the
    // preparation never stores such codes.
    assert_ne!(e4m3_to_f32(a8::table_byte(0, 1)), 0.5 * 2f32.powi(-6));
    assert!(a8::table_byte(13, 7) & 0x80 != 0);
}

#[test]
fn every_value_has_distinct_bits_and_words_follow_the_fragment() {
    // 128 rows × 2 tiles of K, K not a multiple of 128 (the padded tail is addressable).
    let (rows, k) = (128usize, 192usize);
    let kp = a8::padded_k(k);
    assert_eq!(kp, 256);
    assert_eq!(a8::value_bytes(rows, k), rows * kp / 2);
    let mut seen = HashSet::new();
    for r in 0..rows {
        for c in 0..kp {
            let (off, mag, sign) = a8::value_position(rows, k, r, c).expect("inside");
            assert!(off % 4 == 0 && off < a8::value_bytes(rows, k));
            assert!(mag % 4 == 0 && mag <= 28 && sign % 4 == 3, "({r}, {c})");
            for bit in [mag, mag + 1, mag + 2, sign] {
                assert!(seen.insert(off * 8 + bit as usize), "({r}, {c}) bit {bit} reused");
            }
            // Fragment: thread t of the word holds rows r0, r0+8 and k = c0 + i (+16).
            let tile_off = off % a8::TILE_BYTES;
            let (h, rest) = (tile_off / 2048, tile_off % 2048);
            let (t, slot) = (rest / 16, (rest % 16) / 4);
            let (w, lane) = (t / 32, t % 32);
            let (step, r8) = (2 * h + slot / 2, slot % 2);
            assert_eq!(r % 64, 16 * w + lane / 4 + 8 * r8, "({r}, {c}) row");
            let upper = mag >= 16;
            let i = (mag % 16) / 4;
            let k_in = 32 * step + usize::from(upper) * 16 + 4 * (lane % 4) + i as usize;
            assert_eq!(c % 128, k_in, "({r}, {c}) k");
            // a0/a1 signs at bits 8i + 7, a2/a3 at 8i + 3.
            assert_eq!(sign, 8 * i + if upper { 3 } else { 7 });
        }
    }
    assert_eq!(seen.len(), rows * kp * 4);
    assert_eq!(a8::value_position(rows, k, rows, 0), None);
    assert_eq!(a8::value_position(rows, k, 0, kp), None);
    assert_eq!(a8::value_position(100, k, 0, 0), None, "rows must be a multiple of 64");
}

#[test]
fn scale_codes_one_per_row_and_k32_block() {
    let (rows, k) = (64usize, 320usize);
    let mut seen = HashSet::new();
    for r in 0..rows {
        for blk in 0..a8::padded_k(k) / 32 {
            let at = a8::scale_position(rows, k, r, blk * 32).expect("inside");
            for c in blk * 32..blk * 32 + 32 {
                assert_eq!(a8::scale_position(rows, k, r, c), Some(at));
            }
            assert!(seen.insert(at));
            // The kernel reads byte j (K32 step) of row r's word in the tile.
            assert_eq!(at % a8::SCALE_TILE_BYTES, r * 4 + blk % 4);
        }
    }
    assert_eq!(seen.len(), a8::scale_bytes(rows, k));
}
