//! Pure ALU semantics: integer and f32 arithmetic, comparisons, conversions (PTX ISA §9.7).

use moegen_dsl::formats::{cvt_e2m1x2, cvt_e4m3x2, e4m3_to_f32};

pub(super) fn f32_of(bits: u64) -> f32 {
    f32::from_bits(bits as u32)
}

pub(super) fn bits_f32(v: f32) -> u64 {
    u64::from(v.to_bits())
}

/// Width in bytes of a type suffix.
pub(super) fn width(ty: &str) -> Option<usize> {
    Some(match ty {
        "u8" | "s8" | "b8" => 1,
        "u16" | "s16" | "b16" | "f16" | "bf16" => 2,
        "u32" | "s32" | "b32" | "f32" => 4,
        "u64" | "s64" | "b64" | "f64" => 8,
        _ => return None,
    })
}

pub(super) fn mask(v: u64, ty: &str) -> u64 {
    match width(ty) {
        Some(1) => v & 0xFF,
        Some(2) => v & 0xFFFF,
        Some(4) => v & 0xFFFF_FFFF,
        _ if ty == "pred" => u64::from(v != 0),
        _ => v,
    }
}

/// The six ordered comparisons (`lt le gt ge eq ne`); for floats they are false when an
/// operand is NaN, except `ne`, which PTX also makes false then (it is the ordered form).
fn ordered<T: PartialOrd>(cmp: &str, a: T, b: T) -> Option<bool> {
    Some(match cmp {
        "lt" => a < b,
        "le" => a <= b,
        "gt" => a > b,
        "ge" => a >= b,
        "eq" => a == b,
        "ne" => matches!(
            a.partial_cmp(&b),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Greater)
        ),
        _ => return None,
    })
}

pub(super) fn compare(cmp: &str, ty: &str, a: u64, b: u64) -> Option<bool> {
    match ty {
        "u32" | "b32" => ordered(cmp, a as u32, b as u32),
        "s32" => ordered(cmp, a as u32 as i32, b as u32 as i32),
        "f32" if cmp == "nan" => Some(f32_of(a).is_nan() || f32_of(b).is_nan()),
        "f32" => ordered(cmp, f32_of(a), f32_of(b)),
        _ => None,
    }
}

/// Arithmetic on evaluated operands `v` (v[0] is the first source). `None`: not modelled.
pub(super) fn arith(parts: &[&str], v: &[u64]) -> Option<Result<u64, &'static str>> {
    let ty = *parts.last()?;
    let op = parts[0];
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    if ty == "f32" {
        let (a, b) = (f32_of(get(0)), f32_of(get(1)));
        let nan_mode = parts.contains(&"NaN");
        // `.rn` is IEEE round-to-nearest-even; min/max prefer the non-NaN operand unless
        // `.NaN` asks for NaN propagation.
        let r = match op {
            "add" => a + b,
            "sub" => a - b,
            "mul" => a * b,
            "div" => a / b,
            "fma" => a.mul_add(b, f32_of(get(2))),
            "abs" => a.abs(),
            "neg" => -a,
            "min" | "max" if nan_mode && (a.is_nan() || b.is_nan()) => f32::NAN,
            "min" => a.min(b),
            "max" => a.max(b),
            _ => return None,
        };
        // Arithmetic NaN results are the canonical NaN 0x7FFFFFFF (PTX ISA; observed on an
        // H200), except abs/neg, which only touch the sign bit.
        if r.is_nan() && !matches!(op, "abs" | "neg") {
            return Some(Ok(0x7FFF_FFFF));
        }
        return Some(Ok(bits_f32(r)));
    }
    if ty == "pred" {
        let (a, b) = (get(0) != 0, get(1) != 0);
        return Some(Ok(u64::from(match op {
            "and" => a && b,
            "or" => a || b,
            "xor" => a ^ b,
            "not" => !a,
            _ => return None,
        })));
    }
    if op == "bfi" {
        // bfi.b32 d, a, b, pos, len: b with bits [pos, pos+len) replaced by a's low bits.
        let (a, b, pos, len) =
            (get(0) as u32, get(1) as u32, (get(2) & 0xFF) as u32, (get(3) & 0xFF) as u32);
        if len == 0 || pos >= 32 {
            return Some(Ok(u64::from(b)));
        }
        let len = len.min(32 - pos);
        let m = if len == 32 { u32::MAX } else { ((1u32 << len) - 1) << pos };
        return Some(Ok(u64::from((b & !m) | ((a << pos) & m))));
    }
    let wide = parts.contains(&"wide");
    match ty {
        "u64" | "s64" | "b64" => {
            let (a, b) = (get(0), get(1));
            Some(Ok(match op {
                "add" => a.wrapping_add(b),
                "sub" => a.wrapping_sub(b),
                "mul" => a.wrapping_mul(b),
                "and" => a & b,
                "or" => a | b,
                "xor" => a ^ b,
                "shl" => a.checked_shl(b as u32).unwrap_or(0),
                "shr" => a.checked_shr(b as u32).unwrap_or(0),
                _ => return None,
            }))
        }
        "u32" | "b32" | "s32" => {
            let (a, b) = (get(0) as u32, get(1) as u32);
            let signed = ty == "s32";
            Some(Ok(match op {
                "add" => u64::from(a.wrapping_add(b)),
                "sub" => u64::from(a.wrapping_sub(b)),
                "mul" if wide && signed => (i64::from(a as i32) * i64::from(b as i32)) as u64,
                "mul" if wide => u64::from(a) * u64::from(b),
                "mul" => u64::from(a.wrapping_mul(b)),
                "mad" => u64::from(a.wrapping_mul(b).wrapping_add(get(2) as u32)),
                // PTX leaves division by zero undefined; a kernel doing it is reported.
                "div" | "rem" if b == 0 => return Some(Err("division by zero")),
                "div" if signed => u64::from(((a as i32).wrapping_div(b as i32)) as u32),
                "rem" if signed => u64::from(((a as i32).wrapping_rem(b as i32)) as u32),
                "div" => u64::from(a / b),
                "rem" => u64::from(a % b),
                "min" if signed => u64::from((a as i32).min(b as i32) as u32),
                "max" if signed => u64::from((a as i32).max(b as i32) as u32),
                "min" => u64::from(a.min(b)),
                "max" => u64::from(a.max(b)),
                "shl" => u64::from(if b >= 32 { 0 } else { a << b }),
                "shr" if signed => u64::from(((a as i32) >> b.min(31)) as u32),
                "shr" => u64::from(if b >= 32 { 0 } else { a >> b }),
                "and" => u64::from(a & b),
                "or" => u64::from(a | b),
                "xor" => u64::from(a ^ b),
                "not" => u64::from(!a),
                "neg" => u64::from(a.wrapping_neg()),
                _ => return None,
            }))
        }
        _ => None,
    }
}

pub(super) fn f16_bits_to_f32(h: u16) -> f32 {
    // IEEE binary16 → binary32, exact.
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x3FF);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: value = man · 2^-24.
            let v = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        31 => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

pub(super) fn f32_to_f16_bits_exact(x: f32) -> u16 {
    // Only used for E4M3 values, which f16 represents exactly. NaN becomes the canonical
    // f16 NaN 0x7FFF (observed on an H200).
    if x.is_nan() {
        return 0x7FFF;
    }
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a == 0.0 {
        return sign;
    }
    if a < 2f32.powi(-14) {
        return sign | (a * 2f32.powi(24)) as u16;
    }
    let bits = a.to_bits();
    let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
    sign | ((exp as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
}

pub(super) fn round_bf16(x: f32) -> u16 {
    // NaN becomes the canonical bf16 NaN 0x7FFF (observed on an H200).
    if x.is_nan() {
        return 0x7FFF;
    }
    let b = x.to_bits();
    (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// `cvt` forms (PTX ISA §9.7.9.21), keyed by the opcode's parts.
pub(super) fn convert(parts: &[&str], a: u64, b: Option<u64>) -> Option<u64> {
    let key: Vec<&str> = parts[1..].to_vec();
    Some(match key.as_slice() {
        ["u64", "u32"] => a & 0xFFFF_FFFF,
        ["u16", "u32"] => a & 0xFFFF,
        ["u32", "u16"] => a & 0xFFFF,
        ["f32", "f16"] => bits_f32(f16_bits_to_f32(a as u16)),
        ["f32", "bf16"] => bits_f32(f32::from_bits(((a as u32) & 0xFFFF) << 16)),
        ["rn", "bf16", "f32"] => u64::from(round_bf16(f32_of(a))),
        // d = {a → upper half, b → lower half}.
        ["rn", "bf16x2", "f32"] => {
            (u64::from(round_bf16(f32_of(a))) << 16) | u64::from(round_bf16(f32_of(b?)))
        }
        ["rn", "satfinite", "e4m3x2", "f32"] => u64::from(cvt_e4m3x2(f32_of(a), f32_of(b?))),
        ["rn", "satfinite", "e2m1x2", "f32"] => u64::from(cvt_e2m1x2(f32_of(a), f32_of(b?))),
        // Byte i of the source becomes half i of the result.
        ["rn", "f16x2", "e4m3x2"] => {
            let lo = f32_to_f16_bits_exact(e4m3_to_f32(a as u8));
            let hi = f32_to_f16_bits_exact(e4m3_to_f32((a >> 8) as u8));
            (u64::from(hi) << 16) | u64::from(lo)
        }
        ["rni", "f32", "f32"] if f32_of(a).is_nan() => 0x7FFF_FFFF,
        ["rni", "f32", "f32"] => bits_f32(f32_of(a).round_ties_even()),
        // Float → int saturates; NaN gives 0 (PTX ISA cvt).
        ["rzi", "s32", "f32"] => u64::from(f32_of(a).trunc() as i32 as u32),
        _ => return None,
    })
}
