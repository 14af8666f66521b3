//! The wgmma test harness: one warpgroup runs fence, one `wgmma.mma_async`, commit and
//! wait, with the operands laid out here from logical matrices by the PTX ISA rules.
#![allow(dead_code)]

use moegen_sim::{Arg, Device, LaunchConfig, SimError, launch, parse_module};

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The K-major shared-memory layouts of the PTX ISA ("Shared Memory Matrix Layout").
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// Rows of `bytes` (128, 64, 32), 8-row groups one pattern (8 rows) apart, the operand
    /// starting `k_offset` bytes into its 1024-aligned region.
    Swizzle { bytes: usize, k_offset: usize },
    /// 8x16-byte core matrices: rows 16 bytes apart, the second K half `lbo` further, 8-row
    /// groups `sbo` apart.
    Interleave { lbo: usize, sbo: usize },
}

/// Every shared-memory layout the wgmma tests run: each swizzle with K offsets into its
/// atom, and interleaved (no-swizzle) tiles with two strides.
pub const LAYOUTS: [Layout; 8] = [
    Layout::Swizzle { bytes: 128, k_offset: 0 },
    Layout::Swizzle { bytes: 128, k_offset: 64 },
    Layout::Swizzle { bytes: 128, k_offset: 96 },
    Layout::Swizzle { bytes: 64, k_offset: 0 },
    Layout::Swizzle { bytes: 64, k_offset: 32 },
    Layout::Swizzle { bytes: 32, k_offset: 0 },
    Layout::Interleave { lbo: 128, sbo: 256 },
    Layout::Interleave { lbo: 8192, sbo: 128 },
];

/// Where A and B live in shared memory.
pub const A_AT: usize = 0;
pub const B_AT: usize = 16384;
pub const SMEM: usize = 53248;

/// One wgmma: logical A (64x16), B (Nx16, K-major), C (64xN f32 bits) and the modifiers.
pub struct Case {
    pub n: usize,
    pub a_regs: bool,
    pub bf16: bool,
    pub layout: Layout,
    pub a: Vec<[u16; 16]>,
    pub b: Vec<[u16; 16]>,
    pub c: Vec<Vec<u32>>,
    pub neg_a: bool,
    pub neg_b: bool,
    /// The scale-d operand as written: "0", "1", "%p1" or "!%p1".
    pub scale_d: &'static str,
    /// The value %p1 is set from.
    pub scale_param: u32,
}

impl Case {
    pub fn new(n: usize, a_regs: bool, r: &mut Rng) -> Case {
        let mut c = Case {
            n,
            a_regs,
            bf16: true,
            layout: Layout::Swizzle { bytes: 128, k_offset: 0 },
            a: vec![],
            b: vec![],
            c: vec![],
            neg_a: false,
            neg_b: false,
            scale_d: "1",
            scale_param: 1,
        };
        c.fill(r);
        c
    }

    /// Random values with exponents in -4..=4 (and some zeros), so that every sum of 16
    /// products and the accumulator is exact in f64.
    pub fn fill(&mut self, r: &mut Rng) {
        let bf16 = self.bf16;
        let elem = |r: &mut Rng| -> u16 {
            let x = r.next();
            if x.is_multiple_of(10) {
                return 0;
            }
            let (sign, e, m) = ((x >> 8) & 1, ((x >> 9) % 9) as i64 - 4, x >> 16);
            if bf16 {
                ((sign << 15) | (((127 + e) as u64) << 7) | (m & 0x7F)) as u16
            } else {
                ((sign << 15) | (((15 + e) as u64) << 10) | (m & 0x3FF)) as u16
            }
        };
        self.a = (0..64).map(|_| std::array::from_fn(|_| elem(r))).collect();
        self.b = (0..self.n).map(|_| std::array::from_fn(|_| elem(r))).collect();
        self.c = (0..64)
            .map(|_| {
                (0..self.n)
                    .map(|_| {
                        let x = r.next();
                        let e = ((x >> 9) % 9) as u32 + 123;
                        ((x & 1) << 31) as u32 | (e << 23) | ((x >> 20) as u32 & 0x7F_FFFF)
                    })
                    .collect()
            })
            .collect();
    }

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
                (
                    start,
                    (mode << 62) | (((sbo >> 4) as u64) << 32) | (1 << 16) | (start >> 4) as u64,
                )
            }
            Layout::Interleave { lbo, sbo } => {
                (at, (((sbo >> 4) as u64) << 32) | (((lbo >> 4) as u64) << 16) | (at >> 4) as u64)
            }
        }
    }

    pub fn adesc(&self) -> u64 {
        self.region(A_AT).1
    }

    pub fn bdesc(&self) -> u64 {
        self.region(B_AT).1
    }

    /// Byte offset of element k of row r of the operand whose region starts at `at`.
    pub fn place(&self, at: usize, r: usize, k: usize) -> usize {
        match self.layout {
            Layout::Swizzle { bytes, k_offset } => {
                let logical = at + k_offset + (r / 8) * 8 * bytes + (r % 8) * bytes + 2 * k;
                let mask = bytes / 16 - 1;
                let (chunk, phase) = ((logical >> 4) & mask, (logical >> 7) & mask);
                (logical & !(mask << 4)) | ((chunk ^ phase) << 4)
            }
            Layout::Interleave { lbo, sbo } => {
                at + (r / 8) * sbo + (r % 8) * 16 + (k / 8) * lbo + 2 * (k % 8)
            }
        }
    }

    pub fn image(&self) -> Vec<u8> {
        let mut img = vec![0u8; SMEM];
        for (at, rows) in [(A_AT, &self.a), (B_AT, &self.b)] {
            for (r, row) in rows.iter().enumerate() {
                for (k, v) in row.iter().enumerate() {
                    let p = self.place(at, r, k);
                    img[p..p + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        img
    }

    pub fn scale(&self) -> bool {
        match self.scale_d {
            "0" => false,
            "1" => true,
            "%p1" => self.scale_param != 0,
            _ => self.scale_param == 0,
        }
    }
}

/// Row and column of accumulator register i of thread t (PTX ISA Figure "WGMMA .m64nNk16
/// register fragment layout for accumulator matrix D").
pub fn d_position(t: usize, i: usize) -> (usize, usize) {
    let (w, l) = (t / 32, t % 32);
    (16 * w + l / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (l % 4) + i % 2)
}

/// The result at (row, col) among `got` (thread-major, N/2 registers each).
pub fn d_value(case: &Case, got: &[u32], row: usize, col: usize) -> u32 {
    let half = case.n / 2;
    (0..128 * half).find(|&j| d_position(j / half, j % half) == (row, col)).map_or(0, |j| got[j])
}

fn value(h: u16, bf16: bool) -> f64 {
    if bf16 {
        f64::from(f32::from_bits(u32::from(h) << 16))
    } else {
        let (s, e, m) = (h >> 15, i32::from((h >> 10) & 0x1F), f64::from(h & 0x3FF));
        let v = match e {
            0 => m * 2f64.powi(-24),
            31 if m == 0.0 => f64::INFINITY,
            31 => f64::NAN,
            _ => (1024.0 + m) * 2f64.powi(e - 25),
        };
        if s == 1 { -v } else { v }
    }
}

/// The nominal exponent of a non-zero finite element: its leading bit's, a subnormal's the
/// format's minimum normal exponent.
fn nominal(h: u16, bf16: bool) -> i32 {
    let (e, bias) =
        if bf16 { (i32::from((h >> 7) & 0xFF), 127) } else { (i32::from((h >> 10) & 0x1F), 15) };
    e.max(1) - bias
}

/// The measured H200 model (docs/simulator.md): the products of non-zero operands and a
/// non-zero accumulator, each truncated toward zero to a multiple of 2^(emax − 25) where
/// emax is the largest nominal exponent (a product's: its operands' summed), summed
/// exactly, the sum truncated toward zero to 24 significant bits (then to the subnormal
/// grid; ±Inf from 2^128); 0 is +0, NaN canonical. f64 holds every term and scaled term
/// exactly here.
pub fn expected(case: &Case) -> Vec<u32> {
    let half = case.n / 2;
    let sign = |neg: bool| if neg { -1.0 } else { 1.0 };
    (0..128 * half)
        .map(|j| {
            let (row, col) = d_position(j / half, j % half);
            let mut terms = Vec::new();
            for k in 0..16 {
                let (ha, hb) = (case.a[row][k], case.b[col][k]);
                let a = value(ha, case.bf16) * sign(case.neg_a);
                let b = value(hb, case.bf16) * sign(case.neg_b);
                if a != 0.0 && b != 0.0 {
                    terms.push((a * b, nominal(ha, case.bf16) + nominal(hb, case.bf16)));
                } else {
                    terms.push((a * b, i32::MIN)); // 0, or NaN for Inf · 0
                }
            }
            if case.scale() {
                let c = f32::from_bits(case.c[row][col]);
                let e = ((c.to_bits() >> 23) & 0xFF) as i32;
                terms.push((f64::from(c), if c == 0.0 { i32::MIN } else { e.max(1) - 127 }));
            }
            let special: f64 = terms.iter().map(|t| t.0).sum();
            if special.is_nan() {
                return 0x7FFF_FFFF;
            }
            if special.is_infinite() {
                return (special as f32).to_bits();
            }
            let emax = terms.iter().map(|t| t.1).max().unwrap_or(i32::MIN);
            if emax == i32::MIN {
                return 0;
            }
            let q = emax - 25;
            let sum: f64 = terms.iter().map(|&(v, _)| (v * 2f64.powi(-q)).trunc()).sum();
            if sum == 0.0 {
                return 0;
            }
            // Keep the top 24 bits of |sum| (an integer below 2^40).
            let drop = (sum.abs().log2().floor() as i32 - 23).max(0);
            let kept = (sum.abs() / 2f64.powi(drop)).trunc() * 2f64.powi(drop + q);
            let kept = if kept < 2f64.powi(-126) {
                (kept * 2f64.powi(149)).trunc() * 2f64.powi(-149)
            } else {
                kept
            };
            let r = if kept >= 2f64.powi(128) { f32::INFINITY } else { kept as f32 };
            (if sum < 0.0 { -r } else { r }).to_bits()
        })
        .collect()
}

/// Instructions inserted into the kernel around the wgmma (hazard tests).
#[derive(Default, Clone)]
pub struct Hooks {
    pub before_fence: String,
    pub after_fence: String,
    pub after_mma: String,
    pub after_commit: String,
    /// Replaces `wgmma.wait_group.sync.aligned 0;` when set.
    pub wait: Option<String>,
    pub after_wait: String,
    /// Replaces the fence when set.
    pub fence: Option<String>,
    /// Overrides the descriptors.
    pub adesc: Option<u64>,
    pub bdesc: Option<u64>,
    /// Threads per CTA (128 by default).
    pub threads: Option<u32>,
}

/// The kernel text for `case` with `hooks`.
pub fn kernel(case: &Case, h: &Hooks) -> String {
    let n = case.n;
    let half = n / 2;
    let ty = if case.bf16 { "bf16" } else { "f16" };
    let d: Vec<String> = (0..half).map(|i| format!("%f{i}")).collect();
    let d = d.join(", ");
    let a = if case.a_regs { "{%a0, %a1, %a2, %a3}".to_string() } else { "%rd4".to_string() };
    let trans = if case.a_regs { "" } else { " 0," };
    let sa = if case.neg_a { -1 } else { 1 };
    let sb = if case.neg_b { -1 } else { 1 };
    let loads: String =
        (0..half).map(|i| format!("\tld.global.u32 %f{i}, [%rd8+{}];\n", 4 * i)).collect();
    let stores: String =
        (0..half).map(|i| format!("\tst.global.u32 [%rd9+{}], %f{i};\n", 4 * i)).collect();
    let fence = h.fence.clone().unwrap_or_else(|| "\twgmma.fence.sync.aligned;\n".into());
    let wait = h.wait.clone().unwrap_or_else(|| "\twgmma.wait_group.sync.aligned 0;\n".into());
    let scale = case.scale_d;
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
\tsetp.ne.u32 %p1, %r1, 0;\n{}{fence}{}\
\twgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{d}}}, {a}, %rd5, {scale}, {sa}, {sb},{trans} 0;\n{}\
\twgmma.commit_group.sync.aligned;\n{}{wait}{}\
\tadd.u64 %rd9, %rd3, %rd6;\n{stores}\tret;\n}}\n",
        2 * n,
        h.before_fence,
        h.after_fence,
        h.after_mma,
        h.after_commit,
        h.after_wait,
    )
}

/// Runs `case` with `hooks`; the accumulators of the 128 threads, thread-major.
pub fn run_hooked(case: &Case, h: &Hooks) -> Result<Vec<u32>, SimError> {
    let m = parse_module(&kernel(case, h))?;
    let half = case.n / 2;
    let mut dev = Device::new();
    let img = dev.upload(&case.image());
    // A fragments (PTX ISA Figure "WGMMA .m64nNk16 register fragment layout for matrix A"):
    // register j of thread l of warp w: row 16w + l/4 + 8(j%2), columns 2(l%4) + 8(j/2), +1.
    let mut frag = Vec::new();
    for t in 0..128 {
        let (w, l) = (t / 32, t % 32);
        for j in 0..4 {
            let (row, col) = (16 * w + l / 4 + 8 * (j % 2), 2 * (l % 4) + 8 * (j / 2));
            let v = u32::from(case.a[row][col]) | u32::from(case.a[row][col + 1]) << 16;
            frag.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut cinit = Vec::new();
    for t in 0..128 {
        for i in 0..half {
            let (row, col) = d_position(t, i);
            cinit.extend_from_slice(&case.c[row][col].to_le_bytes());
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
        Arg::U64(h.adesc.unwrap_or(case.adesc())),
        Arg::U64(h.bdesc.unwrap_or(case.bdesc())),
        Arg::U32(case.scale_param),
    ];
    let cfg = LaunchConfig::new(1, h.threads.unwrap_or(128), SMEM);
    launch(&mut dev, &m, "k", &cfg, &args)?;
    let raw = dev.download(out, 4 * 128 * half).unwrap_or_default();
    Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Runs `case` with the default hooks plus `after_wait`.
pub fn run_case(case: &Case, after_wait: &str) -> Result<Vec<u32>, SimError> {
    run_hooked(case, &Hooks { after_wait: after_wait.into(), ..Hooks::default() })
}

/// Asserts `got == want`, reporting the number of differences and the first few positions.
pub fn assert_same(case: &Case, got: &[u32], want: &[u32], what: &str) {
    let half = case.n / 2;
    let diffs: Vec<String> = (0..want.len())
        .filter(|&j| got.get(j) != Some(&want[j]))
        .take(4)
        .map(|j| {
            let (row, col) = d_position(j / half, j % half);
            format!(
                "D[{row}][{col}] {:#010x} (want {:#010x})",
                got.get(j).copied().unwrap_or(0),
                want[j]
            )
        })
        .collect();
    let count = (0..want.len()).filter(|&j| got.get(j) != Some(&want[j])).count();
    assert!(count == 0 && got.len() == want.len(), "{what}: {count} differ: {}", diffs.join(", "));
}
