//! `wgmma.mma_async …m64nNk32.f32.e4m3.e4m3` end to end: one warpgroup runs fence, one
//! wgmma, commit and wait on operands placed here from logical matrices (A 64x32 and B
//! Nx32 of e4m3 bytes, K-major) by the PTX ISA rules: A in the 8-bit register fragments
//! ("Register Fragments", m64nNk32: register j, byte i of thread l of warp w holds row
//! 16w + l/4 + 8(j%2), column 4(l%4) + i + 16(j/2)) or in shared memory like B (a row is
//! its 32 bytes, K in order). Every accumulator is compared with `wgmma_k32_e4m3_model`
//! on the operands placed, so any layout or sign error fails. The model itself has unit
//! tests in `src/exec/wgmma_fp8.rs`. Also: the forms that are not modelled are refused.

mod common;

use common::{Layout, Rng, d_position};
use moegen_sim::{Arg, Device, LaunchConfig, SimError, launch, parse_module, wgmma_k32_e4m3_model};

const A_AT: usize = 0;
const B_AT: usize = 16384;
const SMEM: usize = 53248;

struct Case {
    n: usize,
    a_regs: bool,
    layout: Layout,
    /// A: 64 rows, B: N rows (columns of the product), 32 e4m3 bytes each.
    a: Vec<[u8; 32]>,
    b: Vec<[u8; 32]>,
    /// The initial accumulators, 64 x N f32 bits.
    c: Vec<Vec<u32>>,
    neg_a: bool,
    neg_b: bool,
    /// The scale-d operand as written: "0", "1", "%p1" or "!%p1" (%p1 = `scale_param` ≠ 0).
    scale_d: &'static str,
    scale_param: u32,
}

/// A random e4m3 byte: some zeros (both signs) and subnormals, never NaN.
fn e4m3(r: &mut Rng) -> u8 {
    let x = r.next();
    let b = (x >> 8) as u8;
    match x % 16 {
        0 => b & 0x80,
        1 => b & 0x87,
        _ if b & 0x7F == 0x7F => b ^ 1,
        _ => b,
    }
}

impl Case {
    fn new(n: usize, a_regs: bool, r: &mut Rng) -> Case {
        let a = (0..64).map(|_| std::array::from_fn(|_| e4m3(r))).collect();
        let b = (0..n).map(|_| std::array::from_fn(|_| e4m3(r))).collect();
        // Accumulators from 2^-8 to 2^15, of the order of the products, and some zeros.
        let c = (0..64)
            .map(|_| {
                (0..n)
                    .map(|_| {
                        let x = r.next();
                        if x.is_multiple_of(13) {
                            return 0;
                        }
                        let e = ((x >> 9) % 24) as u32 + 119;
                        ((x & 1) << 31) as u32 | (e << 23) | ((x >> 20) as u32 & 0x7F_FFFF)
                    })
                    .collect()
            })
            .collect();
        Case {
            n,
            a_regs,
            layout: Layout::Swizzle { bytes: 128, k_offset: 0 },
            a,
            b,
            c,
            neg_a: false,
            neg_b: false,
            scale_d: "1",
            scale_param: 1,
        }
    }

    fn scale(&self) -> bool {
        match self.scale_d {
            "0" => false,
            "1" => true,
            "%p1" => self.scale_param != 0,
            _ => self.scale_param == 0,
        }
    }

    /// The start of the operand whose region begins at `at` and its descriptor.
    fn region(&self, at: usize) -> (usize, u64) {
        match self.layout {
            Layout::Swizzle { bytes, k_offset } => {
                let mode: u64 = match bytes {
                    128 => 1,
                    64 => 2,
                    _ => 3,
                };
                let start = at + k_offset;
                let sbo = 8 * bytes;
                (start, (mode << 62) | ((sbo as u64 >> 4) << 32) | (1 << 16) | (start as u64 >> 4))
            }
            Layout::Interleave { lbo, sbo } => {
                (at, ((sbo as u64 >> 4) << 32) | ((lbo as u64 >> 4) << 16) | (at as u64 >> 4))
            }
        }
    }

    /// Byte offset of byte `k` (element k) of row `r` of the operand at `at` (PTX ISA
    /// "Shared Memory Matrix Layout", K-major).
    fn place(&self, at: usize, r: usize, k: usize) -> usize {
        match self.layout {
            Layout::Swizzle { bytes, k_offset } => {
                let logical = at + k_offset + (r / 8) * 8 * bytes + (r % 8) * bytes + k;
                let mask = bytes / 16 - 1;
                let (chunk, phase) = ((logical >> 4) & mask, (logical >> 7) & mask);
                (logical & !(mask << 4)) | ((chunk ^ phase) << 4)
            }
            Layout::Interleave { lbo, sbo } => {
                at + (r / 8) * sbo + (r % 8) * 16 + (k / 16) * lbo + k % 16
            }
        }
    }

    fn image(&self) -> Vec<u8> {
        let mut img = vec![0u8; SMEM];
        for (at, rows) in [(A_AT, &self.a), (B_AT, &self.b)] {
            for (r, row) in rows.iter().enumerate() {
                for (k, &v) in row.iter().enumerate() {
                    img[self.place(at, r, k)] = v;
                }
            }
        }
        img
    }

    fn kernel(&self) -> String {
        let half = self.n / 2;
        let d: Vec<String> = (0..half).map(|i| format!("%f{i}")).collect();
        let a = if self.a_regs { "{%a0, %a1, %a2, %a3}" } else { "%rd4" };
        let sa = if self.neg_a { -1 } else { 1 };
        let sb = if self.neg_b { -1 } else { 1 };
        let mma = format!(
            "wgmma.mma_async.sync.aligned.m64n{}k32.f32.e4m3.e4m3 {{{}}}, {a}, %rd5, {}, {sa}, {sb};",
            self.n,
            d.join(", "),
            self.scale_d
        );
        kernel_text(self.n, &mma)
    }

    /// Runs the kernel; the accumulators of the 128 threads, thread-major.
    fn run(&self) -> Result<Vec<u32>, SimError> {
        let m = parse_module(&self.kernel())?;
        let half = self.n / 2;
        let mut dev = Device::new();
        let img = dev.upload(&self.image());
        let mut frag = Vec::new();
        for t in 0..128 {
            let (w, l) = (t / 32, t % 32);
            for j in 0..4 {
                let row = 16 * w + l / 4 + 8 * (j % 2);
                for i in 0..4 {
                    frag.push(self.a[row][4 * (l % 4) + i + 16 * (j / 2)]);
                }
            }
        }
        let mut cinit = Vec::new();
        for t in 0..128 {
            for i in 0..half {
                let (row, col) = d_position(t, i);
                cinit.extend_from_slice(&self.c[row][col].to_le_bytes());
            }
        }
        let afrag = dev.upload(&frag);
        let c = dev.upload(&cinit);
        let out = dev.alloc(4 * 128 * half);
        let args = [
            Arg::U64(img),
            Arg::U64(afrag),
            Arg::U64(c),
            Arg::U64(out),
            Arg::U64(self.region(A_AT).1),
            Arg::U64(self.region(B_AT).1),
            Arg::U32(self.scale_param),
        ];
        launch(&mut dev, &m, "k", &LaunchConfig::new(1, 128, SMEM), &args)?;
        let raw = dev.download(out, 4 * 128 * half).unwrap_or_default();
        Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// The model on the logical operands (signs flipped for imm-scale -1), thread-major.
    fn expected(&self) -> Vec<u32> {
        let half = self.n / 2;
        let flip = |row: &[u8; 32], neg: bool| row.map(|x| if neg { x ^ 0x80 } else { x });
        (0..128 * half)
            .map(|j| {
                let (row, col) = d_position(j / half, j % half);
                let acc = self.scale().then(|| f32::from_bits(self.c[row][col]));
                let a = flip(&self.a[row], self.neg_a);
                let b = flip(&self.b[col], self.neg_b);
                wgmma_k32_e4m3_model(&a, &b, acc).to_bits()
            })
            .collect()
    }

    fn check(&self, what: &str) {
        let got = self.run().unwrap_or_else(|e| panic!("{what}: {e}"));
        let want = self.expected();
        let half = self.n / 2;
        assert_eq!(got.len(), want.len(), "{what}");
        let diffs: Vec<String> = (0..want.len())
            .filter(|&j| got[j] != want[j])
            .map(|j| {
                let (row, col) = d_position(j / half, j % half);
                format!("D[{row}][{col}] {:#010x} (want {:#010x})", got[j], want[j])
            })
            .collect();
        assert!(
            diffs.is_empty(),
            "{what}: {} differ: {}",
            diffs.len(),
            diffs[..4.min(diffs.len())].join(", ")
        );
    }
}

/// The kernel: copies the shared image in, loads the A fragment and the accumulators, then
/// fence, `mma`, commit, wait, and stores the accumulators.
fn kernel_text(n: usize, mma: &str) -> String {
    let half = n / 2;
    let loads: String =
        (0..half).map(|i| format!("\tld.global.u32 %f{i}, [%rd8+{}];\n", 4 * i)).collect();
    let stores: String =
        (0..half).map(|i| format!("\tst.global.u32 [%rd9+{}], %f{i};\n", 4 * i)).collect();
    format!(
        ".version 8.8\n.target sm_90a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n\
.visible .entry k(\n.param .u64 img,\n.param .u64 afrag,\n.param .u64 cinit,\n.param .u64 out,\n\
.param .u64 adesc,\n.param .u64 bdesc,\n.param .u32 scaled\n)\n{{\n\
\t.reg .pred %p<4>;\n\t.reg .b32 %r<16>;\n\t.reg .b32 %a<4>;\n\t.reg .b32 %f<128>;\n\t.reg .b64 %rd<16>;\n\
\tmov.u32 %r0, %tid.x;\n\tld.param.u64 %rd0, [img];\n\tld.param.u64 %rd1, [afrag];\n\
\tld.param.u64 %rd2, [cinit];\n\tld.param.u64 %rd3, [out];\n\tld.param.u64 %rd4, [adesc];\n\
\tld.param.u64 %rd5, [bdesc];\n\tld.param.u32 %r1, [scaled];\n\tmov.u32 %r2, smem;\n\
\tmul.lo.u32 %r3, %r0, 16;\nCOPY:\n\tsetp.ge.u32 %p0, %r3, {SMEM};\n\t@%p0 bra COPIED;\n\
\tcvt.u64.u32 %rd6, %r3;\n\tadd.u64 %rd7, %rd0, %rd6;\n\tld.global.v4.u32 {{%r4, %r5, %r6, %r7}}, [%rd7];\n\
\tadd.u32 %r8, %r2, %r3;\n\tst.shared.v4.u32 [%r8], {{%r4, %r5, %r6, %r7}};\n\tadd.u32 %r3, %r3, 2048;\n\tbra COPY;\n\
COPIED:\n\tbar.sync 0;\n\tand.b32 %r9, %r0, 127;\n\
\tmul.wide.u32 %rd6, %r9, 16;\n\tadd.u64 %rd7, %rd1, %rd6;\n\tld.global.v4.u32 {{%a0, %a1, %a2, %a3}}, [%rd7];\n\
\tmul.wide.u32 %rd6, %r9, {};\n\tadd.u64 %rd8, %rd2, %rd6;\n{loads}\
\tsetp.ne.u32 %p1, %r1, 0;\n\twgmma.fence.sync.aligned;\n\t{mma}\n\
\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n\
\tadd.u64 %rd9, %rd3, %rd6;\n{stores}\tret;\n}}\n",
        2 * n,
    )
}

#[test]
fn m64n8k32_from_registers_matches_the_model_everywhere() {
    let mut r = Rng(0xF8F8_1234);
    let case = Case::new(8, true, &mut r);
    assert_eq!(case.expected().len(), 512);
    case.check("m64n8k32 e4m3, A from registers");
    // The check can fail: the same operands with A's K halves swapped (a register-layout
    // error of 16 columns) give other results.
    let mut swapped = Case::new(8, true, &mut Rng(0xF8F8_1234));
    for row in &mut swapped.a {
        row.rotate_left(16);
    }
    let (got, want) = (case.run().unwrap(), swapped.expected());
    assert!((0..512).filter(|&j| got[j] != want[j]).count() > 400);
}

#[test]
fn every_shape_from_registers_and_descriptors() {
    let mut r = Rng(0x5EED);
    for n in (8..=256).step_by(8) {
        for a_regs in [true, false] {
            Case::new(n, a_regs, &mut r).check(&format!("N {n} A from registers {a_regs}"));
        }
    }
}

#[test]
fn every_layout_sign_and_scale_d() {
    let mut r = Rng(77);
    let layouts = common::LAYOUTS;
    for (i, layout) in layouts.into_iter().enumerate() {
        let mut case = Case::new([64, 24, 136, 256][i % 4], i % 2 == 0, &mut r);
        case.layout = layout;
        case.neg_a = i % 3 == 0;
        case.neg_b = i % 4 == 1;
        for scale in ["0", "1", "%p1", "!%p1"] {
            case.scale_d = scale;
            case.scale_param = u32::from(i % 2 == 1);
            case.check(&format!("{layout:?} neg {}/{} scale-d {scale}", case.neg_a, case.neg_b));
        }
    }
}

#[test]
fn nan_and_infinite_accumulators() {
    let mut r = Rng(3);
    let mut case = Case::new(16, true, &mut r);
    case.a[2][7] = 0x7F; // NaN in row 2: every output of the row is the canonical NaN
    case.a[4][9] = 0; // NaN in column 5, even where the other operand is zero
    case.b[5][9] = 0xFF;
    case.c[6][6] = f32::NEG_INFINITY.to_bits();
    case.c[7][7] = f32::NAN.to_bits();
    case.check("specials");
    let got = case.run().unwrap();
    let at = |row: usize, col: usize| {
        (0..128 * 8).find(|&j| d_position(j / 8, j % 8) == (row, col)).map(|j| got[j]).unwrap()
    };
    assert_eq!(at(2, 11), 0x7FFF_FFFF);
    assert_eq!(at(4, 5), 0x7FFF_FFFF);
    assert_eq!(at(6, 6), f32::NEG_INFINITY.to_bits());
    assert_eq!(at(7, 7), 0x7FFF_FFFF);
}

/// Parses a kernel issuing `mma` (n = 8).
fn parse(mma: &str) -> Result<(), SimError> {
    parse_module(&kernel_text(8, mma)).map(|_| ())
}

#[test]
fn unmodelled_fp8_forms_are_refused() {
    let d = "{%f0, %f1, %f2, %f3}";
    let a = "{%a0, %a1, %a2, %a3}";
    assert!(
        parse(&format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1;"
        ))
        .is_ok()
    );
    assert!(
        parse(&format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, %rd4, %rd5, %p1, -1, -1;"
        ))
        .is_ok()
    );
    for mma in [
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2 {d}, {a}, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2 {d}, {a}, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e4m3 {d}, %rd4, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n8k16.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1;"),
        format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 {{%f0, %f1}}, {a}, %rd5, 1, 1, 1;"
        ),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.bf16.bf16 {d}, {a}, %rd5, 1, 1, 1, 0;"),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.s8.s8 {d}, {a}, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n12k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n264k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n08k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n8k64.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1;"),
        format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3.satfinite {d}, {a}, %rd5, 1, 1, 1;"
        ),
    ] {
        let opcode = mma.split_whitespace().next().unwrap().to_string();
        match parse(&mma) {
            Err(SimError::Unsupported { opcode: o, .. }) => assert_eq!(o, opcode),
            other => panic!("{mma}: {other:?}"),
        }
    }
    // Operand forms: imm-trans operands (16-bit types only), wrong counts, scales.
    for mma in [
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1, 1, 0;"),
        format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, %rd4, %rd5, 1, 1, 1, 0, 0;"
        ),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 1;"),
        format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {{%f0, %f1}}, {a}, %rd5, 1, 1, 1;"
        ),
        format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {{%a0, %a1}}, %rd5, 1, 1, 1;"
        ),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 1, 2, 1;"),
        format!("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {a}, %rd5, 2, 1, 1;"),
        format!(
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {d}, {{%f3, %a1, %a2, %a3}}, %rd5, 1, 1, 1;"
        ),
    ] {
        match parse(&mma) {
            Err(SimError::BadInstruction { .. }) => {}
            other => panic!("{mma}: {other:?}"),
        }
    }
}

/// 512 single and chained k32 steps an H200 computed (every 3072nd of the 1 572 864 of
/// `validation/experiments/wgmma_e4m3_steps.cu`, seeds 1 and 2; docs/hopper.md): per record
/// A's 32 bytes, B's 32 bytes, scale-d (0/1), the old accumulator's bits, the result's bits.
const H200_STEPS: &[u8] = include_bytes!("data/h200_wgmma_e4m3_steps.bin");

#[test]
fn the_model_gives_what_the_h200_gave() {
    let e4m3 = |x: u8| {
        let (e, m) = (i32::from((x >> 3) & 0xF), f64::from(x & 7));
        let v = if e == 0 { m * 2f64.powi(-9) } else { (8.0 + m) * 2f64.powi(e - 10) };
        if x >> 7 == 1 { -v } else { v }
    };
    assert_eq!(H200_STEPS.len(), 512 * 73);
    let mut not_nearest = 0;
    for r in H200_STEPS.chunks_exact(73) {
        let a: [u8; 32] = r[..32].try_into().unwrap();
        let b: [u8; 32] = r[32..64].try_into().unwrap();
        let word = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
        let acc = (r[64] == 1).then(|| f32::from_bits(word(65)));
        let got = moegen_sim::wgmma_k32_e4m3_model(&a, &b, acc);
        assert_eq!(got.to_bits(), word(69), "a {a:02x?} b {b:02x?} acc {acc:?}");
        let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| e4m3(x) * e4m3(y)).sum::<f64>()
            + f64::from(acc.unwrap_or(0.0));
        not_nearest += usize::from((exact as f32).to_bits() != word(69));
    }
    // The steps are not the exact sum rounded once: the data tells the models apart.
    assert!(not_nearest > 400, "{not_nearest} of 512 differ from round to nearest");
}
