//! The bit-manipulation, packed f32x2 and approximate instructions, each run in a kernel on
//! many inputs and compared with a reference written here from the PTX ISA text (bit by bit
//! where the simulator computes word-wise).

use moegen_sim::{Arg, Device, LaunchConfig, SimError, launch, parse_module};

const HEADER: &str = ".version 8.8\n.target sm_100a\n.address_size 64\n";

/// Runs `inst` (operands %r1..%r4 → %r0, or %rd1..%rd3 → %rd0 when `wide`) once per
/// thread over `inputs` (three words per thread) and returns each thread's result.
fn run(inst: &str, inputs: &[[u64; 3]], wide: bool) -> Result<Vec<u64>, SimError> {
    let n = inputs.len() as u32;
    let (ld, st, w) = if wide {
        ("ld.global.u64", "st.global.u64", 8)
    } else {
        ("ld.global.u32", "st.global.u32", 4)
    };
    let r = if wide { "%rd" } else { "%r" };
    let text = format!(
        "{HEADER}.visible .entry k(\n.param .u64 inp,\n.param .u64 out\n)\n{{\n\
         \t.reg .pred %p<2>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<8>;\n\t.reg .b64 %a<4>;\n\
         \tld.param.u64 %a0, [inp];\n\tld.param.u64 %a1, [out];\n\tmov.u32 %r7, %tid.x;\n\
         \tmul.wide.u32 %a2, %r7, {};\n\tadd.u64 %a0, %a0, %a2;\n\
         \t{ld} {r}1, [%a0];\n\t{ld} {r}2, [%a0+{w}];\n\t{ld} {r}3, [%a0+{}];\n\
         \t{inst}\n\tmul.wide.u32 %a2, %r7, {w};\n\tadd.u64 %a1, %a1, %a2;\n\t{st} [%a1], {r}0;\n\tret;\n}}\n",
        3 * w,
        2 * w
    );
    let m = parse_module(&text)?;
    let mut dev = Device::new();
    let mut bytes = Vec::new();
    for i in inputs {
        for &v in i {
            bytes.extend_from_slice(&v.to_le_bytes()[..w]);
        }
    }
    let inp = dev.upload(&bytes);
    let out = dev.alloc(w * inputs.len());
    launch(&mut dev, &m, "k", &LaunchConfig::new(1, n, 0), &[Arg::U64(inp), Arg::U64(out)])?;
    let raw = dev.download(out, w * inputs.len()).unwrap_or_default();
    Ok(raw
        .chunks_exact(w)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect())
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn words(&mut self, n: usize) -> Vec<[u64; 3]> {
        (0..n)
            .map(|_| {
                [self.next() as u32 as u64, self.next() as u32 as u64, self.next() as u32 as u64]
            })
            .collect()
    }
}

fn check(inst: &str, inputs: &[[u64; 3]], want: impl Fn([u64; 3]) -> u64) {
    let got = run(inst, inputs, false).unwrap();
    for (i, (g, x)) in got.iter().zip(inputs).enumerate() {
        assert_eq!(*g, want(*x) & 0xFFFF_FFFF, "{inst} input {i}: {x:x?}");
    }
}

#[test]
fn prmt_every_mode() {
    let mut r = Rng(7);
    let mut inputs = r.words(512);
    for (i, x) in inputs.iter_mut().enumerate().take(16) {
        x[2] = i as u64; // every selector of the fixed modes
    }
    // Byte k of {b, a}.
    let byte = |x: [u64; 3], k: u64| (((x[1] << 32) | x[0]) >> (8 * (k & 7))) & 0xFF;
    check("prmt.b32 %r0, %r1, %r2, %r3;", &inputs, |x| {
        (0..4).fold(0, |d, k| {
            let sel = (x[2] >> (4 * k)) & 0xF;
            let mut v = byte(x, sel);
            if sel & 8 != 0 {
                v = if v & 0x80 != 0 { 0xFF } else { 0 };
            }
            d | (v << (8 * k))
        })
    });
    // The PTX ISA tables, d.b3 d.b2 d.b1 d.b0 per selector value.
    let tables: [(&str, [[u64; 4]; 4]); 6] = [
        ("f4e", [[3, 2, 1, 0], [4, 3, 2, 1], [5, 4, 3, 2], [6, 5, 4, 3]]),
        ("b4e", [[5, 6, 7, 0], [6, 7, 0, 1], [7, 0, 1, 2], [0, 1, 2, 3]]),
        ("rc8", [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]),
        ("ecl", [[3, 2, 1, 0], [3, 2, 1, 1], [3, 2, 2, 2], [3, 3, 3, 3]]),
        ("ecr", [[0, 0, 0, 0], [1, 1, 1, 0], [2, 2, 1, 0], [3, 2, 1, 0]]),
        ("rc16", [[1, 0, 1, 0], [3, 2, 3, 2], [1, 0, 1, 0], [3, 2, 3, 2]]),
    ];
    for (mode, t) in tables {
        check(&format!("prmt.b32.{mode} %r0, %r1, %r2, %r3;"), &inputs, |x| {
            let row = t[(x[2] & 3) as usize];
            (0..4).fold(0, |d, k| d | (byte(x, row[3 - k]) << (8 * k)))
        });
    }
}

#[test]
fn lop3_shf_bfe() {
    let mut r = Rng(11);
    let inputs = r.words(256);
    for lut in [0x00u64, 0x80, 0xFE, 0x40, 0x1A, 0x96, 0xE8, 0xFF, 0x3C] {
        check(&format!("lop3.b32 %r0, %r1, %r2, %r3, {lut:#x};"), &inputs, |x| {
            (0..32).fold(0, |d, i| {
                let idx = ((x[0] >> i) & 1) << 2 | ((x[1] >> i) & 1) << 1 | ((x[2] >> i) & 1);
                d | (((lut >> idx) & 1) << i)
            })
        });
    }
    let mut shifts = r.words(256);
    for (i, x) in shifts.iter_mut().enumerate() {
        x[2] = [0, 1, 31, 32, 33, 64, 200][i % 7] + (i as u64 / 7) % 3;
    }
    for (dir, mode) in [("l", "clamp"), ("l", "wrap"), ("r", "clamp"), ("r", "wrap")] {
        check(&format!("shf.{dir}.{mode}.b32 %r0, %r1, %r2, %r3;"), &shifts, |x| {
            let n = if mode == "clamp" { x[2].min(32) } else { x[2] & 31 };
            // Bit i of the result is bit i + 32 - n (left) or i + n (right) of {b, a}.
            let src = (x[1] << 32) | x[0];
            (0..32).fold(0, |d, i| {
                let j = if dir == "l" { i + 32 - n } else { i + n };
                d | (if j < 64 { (src >> j) & 1 } else { 0 }) << i
            })
        });
    }
    let mut fields = r.words(512);
    for (i, x) in fields.iter_mut().enumerate() {
        x[1] = [0, 3, 17, 31, 32, 40, 255, 256 + 5][i % 8];
        x[2] = [0, 1, 5, 16, 31, 32, 33, 255][(i / 8) % 8];
    }
    for ty in ["u32", "s32"] {
        check(&format!("bfe.{ty} %r0, %r1, %r2, %r3;"), &fields, |x| {
            let (pos, len) = (x[1] & 0xFF, x[2] & 0xFF);
            let sbit =
                if ty == "u32" || len == 0 { 0 } else { (x[0] >> (pos + len - 1).min(31)) & 1 };
            (0..32).fold(0, |d, i| {
                let v = if i < len && pos + i <= 31 { (x[0] >> (pos + i)) & 1 } else { sbit };
                d | (v << i)
            })
        });
    }
}

fn f(x: u64) -> f32 {
    f32::from_bits(x as u32)
}

/// PTX min/max: a NaN operand is dropped (canonical NaN if both are), -0 < +0.
fn ptx_min(a: f32, b: f32) -> f32 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => f32::from_bits(0x7FFF_FFFF),
        (true, false) => b,
        (false, true) => a,
        _ if a == 0.0 && b == 0.0 => {
            if a.is_sign_negative() {
                a
            } else {
                b
            }
        }
        _ => {
            if a < b {
                a
            } else {
                b
            }
        }
    }
}

#[test]
fn min_max_signed_zeros_three_inputs_and_abs() {
    let specials =
        [0.0f32, -0.0, 1.0, -1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 2.5e-40, -3.0];
    let mut inputs = Vec::new();
    for &a in &specials {
        for &b in &specials {
            for &c in &specials[..4] {
                inputs.push([
                    u64::from(a.to_bits()),
                    u64::from(b.to_bits()),
                    u64::from(c.to_bits()),
                ]);
            }
        }
    }
    let bits = |v: f32| u64::from(if v.is_nan() { 0x7FFF_FFFF } else { v.to_bits() });
    check("min.f32 %r0, %r1, %r2;", &inputs, |x| bits(ptx_min(f(x[0]), f(x[1]))));
    check("max.f32 %r0, %r1, %r2;", &inputs, |x| bits(-ptx_min(-f(x[0]), -f(x[1]))));
    check("min.f32 %r0, %r1, %r2, %r3;", &inputs, |x| {
        bits(ptx_min(ptx_min(f(x[0]), f(x[1])), f(x[2])))
    });
    check("max.NaN.abs.f32 %r0, %r1, %r2, %r3;", &inputs, |x| {
        if x.iter().any(|&v| f(v).is_nan()) {
            return 0x7FFF_FFFF;
        }
        bits(f(x[0]).abs().max(f(x[1]).abs()).max(f(x[2]).abs()))
    });
}

#[test]
fn packed_f32x2_lanes_are_ieee() {
    let mut r = Rng(3);
    let inputs: Vec<[u64; 3]> = (0..256).map(|_| [r.next(), r.next(), r.next()]).collect();
    let lanes = |x: u64| [f(x), f(x >> 32)];
    let canon = |v: f32| u64::from(if v.is_nan() { 0x7FFF_FFFF } else { v.to_bits() });
    let pack = |g: &dyn Fn(usize) -> f32| canon(g(0)) | canon(g(1)) << 32;
    for (inst, op) in [
        ("add.rn.f32x2 %rd0, %rd1, %rd2;", 0),
        ("sub.rn.f32x2 %rd0, %rd1, %rd2;", 1),
        ("mul.rn.f32x2 %rd0, %rd1, %rd2;", 2),
        ("fma.rn.f32x2 %rd0, %rd1, %rd2, %rd3;", 3),
    ] {
        let got = run(inst, &inputs, true).unwrap();
        for (g, x) in got.iter().zip(&inputs) {
            let (a, b, c) = (lanes(x[0]), lanes(x[1]), lanes(x[2]));
            let want = pack(&|i| match op {
                0 => a[i] + b[i],
                1 => a[i] - b[i],
                2 => a[i] * b[i],
                _ => a[i].mul_add(b[i], c[i]),
            });
            assert_eq!(*g, want, "{inst} {x:x?}");
        }
    }
}

#[test]
fn approximate_instructions_run_the_public_model() {
    let mut r = Rng(5);
    let mut inputs: Vec<[u64; 3]> = (0..512).map(|_| [r.next() as u32 as u64, 0, 0]).collect();
    for (i, v) in [
        0.0f32,
        -0.0,
        1e-40,
        -1e-40,
        127.9,
        -126.5,
        -149.5,
        3.0,
        f32::INFINITY,
        -f32::INFINITY,
        f32::NAN,
        2e38,
        9e37,
    ]
    .into_iter()
    .enumerate()
    {
        inputs[i][0] = u64::from(v.to_bits());
    }
    type Model = fn(f32) -> f32;
    let models: [(&str, Model); 4] = [
        ("ex2.approx.ftz.f32", moegen_sim::ex2_approx_ftz_model),
        ("ex2.approx.f32", moegen_sim::ex2_approx_model),
        ("rcp.approx.ftz.f32", moegen_sim::rcp_approx_ftz_model),
        ("rcp.approx.f32", moegen_sim::rcp_approx_model),
    ];
    for (op, model) in models {
        check(&format!("{op} %r0, %r1;"), &inputs, |x| u64::from(model(f(x[0])).to_bits()));
    }
    check("rcp.rn.f32 %r0, %r1;", &inputs, |x| {
        let v = 1.0 / f(x[0]);
        u64::from(if v.is_nan() { 0x7FFF_FFFF } else { v.to_bits() })
    });
}

#[test]
fn mov_unpacks_and_packs() {
    let mut r = Rng(9);
    let inputs = r.words(64);
    check("mov.b32 {%r4, %r5}, %r1;\n\tmov.b32 %r0, {%r5, %r4};", &inputs, |x| {
        (x[0] >> 16) | ((x[0] & 0xFFFF) << 16)
    });
    check(
        "mov.b32 {%r4, %r5, %r6, %r3}, %r1;\n\tmov.b32 %r0, {%r3, %r6, %r5, %r4};",
        &inputs,
        |x| u64::from((x[0] as u32).swap_bytes()),
    );
}

#[test]
fn bf16x2_products_and_u16x2_min_max() {
    let mut r = Rng(21);
    let mut inputs = r.words(768);
    // Moderate exponents, tiny ones (subnormal products), huge ones (overflow), specials.
    for (i, x) in inputs.iter_mut().enumerate() {
        let pick = |v: u64, k: usize| match (i + k) % 6 {
            0 => v & 0x80FF_80FF | 0x3F00_3F00,
            1 => v & 0x807F_807F | 0x0400_0200,
            2 => v & 0x80FF_80FF | 0x7E00_7E00,
            3 => [0x7F80_0000, 0xFF80_0001, 0x0000_8000, 0x7FC0_0001][(i / 6) % 4] | (v & 0xFFFF),
            _ => v,
        };
        x[0] = pick(x[0], 0);
        x[1] = pick(x[1], 3);
    }
    // The nearest bf16 (ties to even; 2^128 stands for Inf), found by search.
    let positive: Vec<(u16, f64)> = (0..=0x7F80u16)
        .map(|h| {
            let v = if h == 0x7F80 {
                2f64.powi(128)
            } else {
                f64::from(f32::from_bits(u32::from(h) << 16))
            };
            (h, v)
        })
        .collect();
    let nearest = |x: f64| -> u16 {
        if x.is_nan() {
            return 0x7FFF;
        }
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let a = x.abs().min(2f64.powi(128));
        let i = positive.partition_point(|&(_, v)| v < a);
        let mut best = positive[i.min(positive.len() - 1)];
        if i > 0 {
            let below = positive[i - 1];
            let (db, da) = (a - below.1, best.1 - a);
            if db < da || (db == da && below.0.is_multiple_of(2)) {
                best = below;
            }
        }
        sign | best.0
    };
    let bf = |h: u64| f64::from(f32::from_bits(((h & 0xFFFF) as u32) << 16));
    check("mul.rn.bf16x2 %r0, %r1, %r2;", &inputs, |x| {
        let lane = |s: u32| u64::from(nearest(bf(x[0] >> s) * bf(x[1] >> s))) << s;
        lane(0) | lane(16)
    });
    for (op, signed) in
        [("min.u16x2", false), ("max.u16x2", false), ("min.s16x2", true), ("max.s16x2", true)]
    {
        check(&format!("{op} %r0, %r1, %r2;"), &inputs, |x| {
            let lane = |s: u32| {
                let (a, b) = ((x[0] >> s) & 0xFFFF, (x[1] >> s) & 0xFFFF);
                let key = |v: u64| if signed { (v as u16 as i16) as i64 } else { v as i64 };
                let pick_a =
                    if op.starts_with("min") { key(a) <= key(b) } else { key(a) >= key(b) };
                (if pick_a { a } else { b }) << s
            };
            lane(0) | lane(16)
        });
    }
}

#[test]
fn ue8m0x2_rounds_to_powers_of_two() {
    // (x, rz, rp, rz.satfinite, rp.satfinite) from the PTX ISA: |x| rounded to 2^(code − 127)
    // toward zero / +∞, codes clamped at 0; past 2^127 NaN (0xFF), or 0xFE with .satfinite.
    let cases: [(u32, [u64; 4]); 12] = [
        (0x3F80_0000, [127, 127, 127, 127]),     // 1
        (0x3FC0_0000, [127, 128, 127, 128]),     // 1.5
        (0xBFC0_0000, [127, 128, 127, 128]),     // -1.5: no sign
        (0x0000_0000, [0, 0, 0, 0]),             // 0: below every code
        (0x0040_0000, [0, 0, 0, 0]),             // 2^-127 exactly
        (0x0040_0001, [0, 1, 0, 1]),             // just above 2^-127
        (0x0000_0001, [0, 0, 0, 0]),             // 2^-149
        (0x7F00_0000, [254, 254, 254, 254]),     // 2^127
        (0x7F00_0001, [254, 0xFF, 254, 0xFE]),   // just above: .rp overflows
        (0x7F80_0000, [0xFF, 0xFF, 0xFE, 0xFE]), // +Inf
        (0x7FC0_0000, [0xFF; 4]),                // NaN
        (0xFFC0_0001, [0xFF; 4]),                // -NaN
    ];
    let forms = ["rz", "rp", "rz.satfinite", "rp.satfinite"];
    for (i, form) in forms.iter().enumerate() {
        // a lands in the high byte, b in the low one.
        let inst = format!("cvt.{form}.ue8m0x2.f32 %r0, %r1, %r2;");
        let inputs: Vec<[u64; 3]> =
            cases.iter().map(|&(x, _)| [u64::from(x), 0x3F80_0000, 0]).collect();
        let got = run(&inst, &inputs, false).unwrap();
        for (&(x, want), g) in cases.iter().zip(got) {
            assert_eq!(g, (want[i] << 8) | 127, "cvt.{form}.ue8m0x2.f32 of {x:#010x}");
        }
    }
    let e = run("cvt.rn.ue8m0x2.f32 %r0, %r1, %r2;", &[[0; 3]], false).unwrap_err();
    assert!(matches!(e, SimError::Unsupported { .. }), "{e}");
}
