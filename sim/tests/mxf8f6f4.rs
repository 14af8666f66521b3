//! `tcgen05.mma.kind::mxf8f6f4.block_scale.block32`, E4M3 A × E2M1 B with UE8M0 scales:
//! hand-written kernels lay A and the padded B out in 128B-swizzled K-major shared memory
//! (by st.shared, or B by a 16U4_ALIGN16B TMA load), put the scale words in TMEM, run MMAs
//! and read the accumulator back; the expected values come from this file's own decoding
//! and f64 arithmetic (exact for the cases built here, which each step checks).

use moegen_sim::{
    Arg, Device, LaunchConfig, SimError, TensorMap, TmaDataType, launch, parse_module,
};

/// Shared memory: TMEM slot at 0, mbarriers at 8 (MMA commit) and 16 (TMA); A (128 rows of
/// 128 bytes) at 1024, B (up to 256 rows) at 17408; the image copied in covers 1024.. .
const A_AT: usize = 1024;
const B_AT: usize = 17408;
const IMG: usize = 49152;
const SMEM: usize = A_AT + IMG;
/// TMEM columns: accumulator at 0, SFA words at 256.., SFB words at 264.. (16 written).
const SF_COL: usize = 256;
const SF_WORDS: usize = 16;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 32) as u8
    }
}

/// One MMA: the 32-element K slice `k` (0..4) of the 128-wide tiles, the scale bytes it
/// selects and enable-input-d.
#[derive(Clone, Copy)]
struct Step {
    k: usize,
    sfa_id: u32,
    sfb_id: u32,
    enable: bool,
}

fn walk(ids: impl Fn(usize) -> (u32, u32)) -> Vec<Step> {
    (0..4)
        .map(|k| {
            let (sfa_id, sfb_id) = ids(k);
            Step { k, sfa_id, sfb_id, enable: k > 0 }
        })
        .collect()
}

struct Case {
    n: usize,
    /// CTAs of the MMA (cta_group): A has 128 · ctas rows.
    ctas: usize,
    /// E4M3 codes, K 0..128 of each row of A.
    a: Vec<[u8; 128]>,
    /// E2M1 codes (low nibble), K 0..128 of each of the N rows of B.
    b: Vec<[u8; 128]>,
    /// What the padding bytes of B's rows hold: 8 per 16-byte chunk.
    pad: Vec<[u8; 64]>,
    /// Scale words: byte i holds the UE8M0 scale SF id i selects; one per row of A and of B.
    sfa: Vec<u32>,
    sfb: Vec<u32>,
    /// TMEM words around the scale words (never read by a correct MMA).
    sf_garbage: Vec<u32>,
    steps: Vec<Step>,
    /// `.scale_vec::1X` instead of `.block32`.
    alias: bool,
    /// B loaded by TMA with a 16U4_ALIGN16B map (one CTA).
    tma: bool,
    /// An instruction descriptor replacing the one the steps imply.
    idesc: Option<u32>,
}

/// Four distinct UE8M0 codes in 124..=130 (scales 2^-3 .. 2^3): a wrong byte changes the
/// result, and every sum of the cases stays exact in f64.
fn scale_word(r: &mut Rng) -> u32 {
    let mut codes: Vec<u8> = (124..=130).collect();
    let mut word = 0;
    for i in 0..4 {
        let c = codes.remove((r.next() % codes.len() as u64) as usize);
        word |= u32::from(c) << (8 * i);
    }
    word
}

impl Case {
    fn random(n: usize, ctas: usize, seed: u64) -> Case {
        let mut r = Rng(seed);
        let e4m3 = |r: &mut Rng| loop {
            let c = r.byte();
            if c & 0x7F != 0x7F {
                return c;
            }
        };
        Case {
            n,
            ctas,
            a: (0..128 * ctas).map(|_| std::array::from_fn(|_| e4m3(&mut r))).collect(),
            b: (0..n).map(|_| std::array::from_fn(|_| r.byte() & 0xF)).collect(),
            pad: (0..n).map(|_| std::array::from_fn(|_| r.byte())).collect(),
            sfa: (0..128 * ctas).map(|_| scale_word(&mut r)).collect(),
            sfb: (0..n).map(|_| scale_word(&mut r)).collect(),
            sf_garbage: (0..ctas * 128 * SF_WORDS).map(|_| r.next() as u32).collect(),
            steps: walk(|k| (k as u32, k as u32)),
            alias: false,
            tma: false,
            idesc: None,
        }
    }

    /// All zero values, scales 1 (code 127) in every byte.
    fn zero(n: usize, steps: Vec<Step>) -> Case {
        Case {
            a: vec![[0; 128]; 128],
            b: vec![[0; 128]; n],
            pad: vec![[0x5A; 64]; n],
            sfa: vec![0x7F7F_7F7F; 128],
            sfb: vec![0x7F7F_7F7F; n],
            steps,
            ..Case::random(n, 1, 1)
        }
    }

    fn idesc(&self, s: &Step) -> u32 {
        if let Some(d) = self.idesc {
            return d;
        }
        let m = self.ctas as u32;
        (s.sfa_id << 29)
            | (m << 27)
            | (1 << 23)
            | ((self.n as u32 >> 3) << 17)
            | (5 << 10)
            | (s.sfb_id << 4)
    }

    /// Shared memory 1024.. of CTA `cta`: A and its N / ctas rows of B, 128B-swizzled.
    fn image(&self, cta: usize) -> Vec<u8> {
        let swz = |x: usize| (x ^ (((x >> 7) & 7) << 4)) - A_AT;
        let mut img = vec![0u8; IMG];
        for r in 0..128 {
            for k in 0..128 {
                img[swz(A_AT + (r / 8) * 1024 + (r % 8) * 128 + k)] = self.a[128 * cta + r][k];
            }
        }
        let nb = self.n / self.ctas;
        for jr in 0..nb {
            let j = cta * nb + jr;
            for c in 0..8 {
                let at = B_AT + (jr / 8) * 1024 + (jr % 8) * 128 + 16 * c;
                for i in 0..8 {
                    let (lo, hi) = (self.b[j][16 * c + 2 * i], self.b[j][16 * c + 2 * i + 1]);
                    img[swz(at + i)] = (lo & 0xF) | (hi << 4);
                    img[swz(at + 8 + i)] = self.pad[j][8 * c + i];
                }
            }
        }
        img
    }

    /// TMEM columns 256..272 of every lane of CTA `cta`: SFA of row r at lane r, column
    /// 256 + r/32; SFB of row j at lane j % 32, column 264 + j/32.
    fn sf_image(&self, cta: usize) -> Vec<u32> {
        let mut w = self.sf_garbage[cta * 128 * SF_WORDS..(cta + 1) * 128 * SF_WORDS].to_vec();
        for r in 0..128 {
            w[r * SF_WORDS + r / 32] = self.sfa[128 * cta + r];
        }
        for j in 0..self.n {
            w[(j % 32) * SF_WORDS + 8 + j / 32] = self.sfb[j];
        }
        w
    }

    /// B as a global tensor for the TMA: 256 elements (128 packed bytes) × N + 3 rows, B's
    /// row j at row j + 3, elements 128..256; garbage elsewhere.
    fn b_tensor(&self) -> Vec<u8> {
        let mut r = Rng(99);
        let mut t: Vec<u8> = (0..128 * (self.n + 3)).map(|_| r.byte()).collect();
        for (j, row) in self.b.iter().enumerate() {
            for e in 0..64 {
                t[128 * (j + 3) + 64 + e] = (row[2 * e] & 0xF) | (row[2 * e + 1] << 4);
            }
        }
        t
    }
}

fn kernel(case: &Case) -> String {
    let g = case.ctas;
    let n = case.n;
    let cluster = if g == 2 { ".reqnctapercluster 2, 1, 1\n" } else { "" };
    let sync = if g == 2 {
        "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
    } else {
        "bar.sync 0;"
    };
    let copy_bytes = if case.tma { B_AT - A_AT } else { IMG };
    let block = if case.alias { "scale_vec::1X" } else { "block32" };
    let mut mmas = String::new();
    for s in &case.steps {
        let desc = |at: usize| {
            (0x4000_4040u64 << 32) | (((at as u64 + 32 * s.k as u64) >> 4) & 0x3FFF) | 0x1_0000
        };
        mmas += &format!(
            "\tmov.b64 %rd8, {};\n\tmov.b64 %rd9, {};\n\tmov.b32 %r10, {};\n\
             \ttcgen05.mma.cta_group::{g}.kind::mxf8f6f4.block_scale.{block} [%r2], %rd8, %rd9, %r10, [%r8], [%r9], {};\n",
            desc(A_AT),
            desc(B_AT),
            case.idesc(s),
            u32::from(s.enable)
        );
    }
    let commit = if g == 2 {
        "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r11], 3;"
    } else {
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r11];"
    };
    let tma_issue = if case.tma {
        format!(
            "\t@%p1 bra LOADED;\n\tmov.u64 %rd7, tmap;\n\tadd.u32 %r13, %r1, {B_AT};\n\tadd.u32 %r14, %r1, 16;\n\
             \tmbarrier.arrive.expect_tx.shared::cta.b64 _, [%r14], {};\n\
             \tcp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r13], [%rd7, {{128, 3}}], [%r14];\nLOADED:\n",
            64 * n
        )
    } else {
        String::new()
    };
    let tma_wait = if case.tma {
        "TMAWAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p5, [%r1+16], 0;\n\t@!%p5 bra TMAWAIT;\n"
    } else {
        ""
    };
    let sf_regs = (40..56).map(|i| format!("%r{i}")).collect::<Vec<_>>().join(", ");
    let sf_loads: String = (0..4)
        .map(|q| {
            format!(
                "\tld.global.v4.u32 {{%r{}, %r{}, %r{}, %r{}}}, [%rd3+{}];\n",
                40 + 4 * q,
                41 + 4 * q,
                42 + 4 * q,
                43 + 4 * q,
                16 * q
            )
        })
        .collect();
    let reads: String = (0..n)
        .step_by(8)
        .map(|c| {
            format!(
                "\ttcgen05.ld.sync.aligned.32x32b.x8.b32 {{%r60, %r61, %r62, %r63, %r64, %r65, %r66, %r67}}, [%r12+{c}];\n\
                 \ttcgen05.wait::ld.sync.aligned;\n\
                 \tst.global.v4.u32 [%rd5+{}], {{%r60, %r61, %r62, %r63}};\n\
                 \tst.global.v4.u32 [%rd5+{}], {{%r64, %r65, %r66, %r67}};\n",
                4 * c,
                4 * c + 16
            )
        })
        .collect();
    format!(
        ".version 8.8\n.target sm_100a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n\
         .visible .entry k(\n.param .align 64 .b8 tmap[128],\n.param .u64 img,\n.param .u64 sf,\n.param .u64 out\n)\n{cluster}{{\n\
         \t.reg .pred %p<8>;\n\t.reg .b32 %r<80>;\n\t.reg .b64 %rd<16>;\n\
         \tmov.u32 %r0, %tid.x;\n\tmov.u32 %r1, smem;\n\tshr.u32 %r20, %r0, 5;\n\tmov.u32 %r21, %cluster_ctarank;\n\
         \tsetp.ne.u32 %p0, %r20, 0;\n\t@%p0 bra ALLOCATED;\n\
         \ttcgen05.alloc.cta_group::{g}.sync.aligned.shared::cta.b32 [%r1], 512;\nALLOCATED:\n\
         \tsetp.ne.u32 %p1, %r0, 0;\n\t@%p1 bra INITED;\n\
         \tmbarrier.init.shared::cta.b64 [%r1+8], 1;\n\tmbarrier.init.shared::cta.b64 [%r1+16], 1;\nINITED:\n\
         \tbar.sync 0;\n\tld.shared.b32 %r2, [%r1];\n\
         \tld.param.u64 %rd0, [img];\n\tmul.wide.u32 %rd1, %r21, {IMG};\n\tadd.u64 %rd0, %rd0, %rd1;\n\
         \tshl.b32 %r4, %r0, 2;\nCOPY:\n\tcvt.u64.u32 %rd1, %r4;\n\tadd.u64 %rd2, %rd0, %rd1;\n\
         \tld.global.u32 %r5, [%rd2];\n\tadd.u32 %r6, %r1, %r4;\n\tst.shared.u32 [%r6+{A_AT}], %r5;\n\
         \tadd.u32 %r4, %r4, 512;\n\tsetp.lt.u32 %p2, %r4, {copy_bytes};\n\t@%p2 bra COPY;\n\
         \tld.param.u64 %rd3, [sf];\n\tmul.wide.u32 %rd4, %r21, {sf_cta};\n\tadd.u64 %rd3, %rd3, %rd4;\n\
         \tmul.wide.u32 %rd4, %r0, {sf_row};\n\tadd.u64 %rd3, %rd3, %rd4;\n{sf_loads}\
         \tshl.b32 %r7, %r20, 21;\n\tadd.u32 %r7, %r7, %r2;\n\
         \ttcgen05.st.sync.aligned.32x32b.x16.b32 [%r7+{SF_COL}], {{{sf_regs}}};\n\
         \ttcgen05.wait::st.sync.aligned;\n\tfence.proxy.async.shared::cta;\n\ttcgen05.fence::before_thread_sync;\n\
         {tma_issue}\t{sync}\n\ttcgen05.fence::after_thread_sync;\n{tma_wait}\
         \t@%p1 bra ISSUED;\n\tsetp.ne.u32 %p3, %r21, 0;\n\t@%p3 bra ISSUED;\n\
         \tadd.u32 %r8, %r2, {SF_COL};\n\tadd.u32 %r9, %r2, {sfb_col};\n\tadd.u32 %r11, %r1, 8;\n\
         {mmas}\t{commit}\nISSUED:\nWAIT:\n\
         \tmbarrier.try_wait.parity.shared::cta.b64 %p4, [%r1+8], 0;\n\t@!%p4 bra WAIT;\n\
         \ttcgen05.fence::after_thread_sync;\n\
         \tshl.b32 %r12, %r20, 21;\n\tadd.u32 %r12, %r12, %r2;\n\
         \tld.param.u64 %rd5, [out];\n\tmul.wide.u32 %rd6, %r21, {out_cta};\n\tadd.u64 %rd5, %rd5, %rd6;\n\
         \tmul.wide.u32 %rd6, %r0, {out_row};\n\tadd.u64 %rd5, %rd5, %rd6;\n{reads}\
         \ttcgen05.fence::before_thread_sync;\n\t{sync}\n\
         \t@%p0 bra FREED;\n\ttcgen05.dealloc.cta_group::{g}.sync.aligned.b32 %r2, 512;\nFREED:\n\tret;\n}}\n",
        sf_cta = 128 * SF_WORDS * 4,
        sf_row = SF_WORDS * 4,
        sfb_col = SF_COL + 8,
        out_cta = 128 * n * 4,
        out_row = n * 4,
    )
}

/// Runs the case; the accumulators as f32 bits, [cta][row][column].
fn run(case: &Case) -> Result<Vec<Vec<Vec<u32>>>, SimError> {
    let m = parse_module(&kernel(case))?;
    let mut dev = Device::new();
    let img: Vec<u8> = (0..case.ctas).flat_map(|c| case.image(c)).collect();
    let sf: Vec<u8> =
        (0..case.ctas).flat_map(|c| case.sf_image(c)).flat_map(u32::to_le_bytes).collect();
    let img = dev.upload(&img);
    let sf = dev.upload(&sf);
    let tensor = dev.upload(&case.b_tensor());
    let map = TensorMap {
        dtype: TmaDataType::U4Padded,
        address: tensor,
        dims: vec![256, case.n as u64 + 3],
        strides: vec![128],
        box_dims: vec![128, case.n as u32],
        swizzle: 128,
    };
    let map = map.encode().map_err(|e| SimError::Launch(e.to_string()))?;
    let bytes = case.ctas * 128 * case.n * 4;
    let out = dev.alloc(bytes);
    let mut cfg = LaunchConfig::new(case.ctas as u32, 128, SMEM);
    cfg.cluster = case.ctas as u32;
    let args = [Arg::Bytes(map.to_vec()), Arg::U64(img), Arg::U64(sf), Arg::U64(out)];
    launch(&mut dev, &m, "k", &cfg, &args)?;
    let got = dev.download(out, bytes).unwrap_or_default();
    let words: Vec<u32> =
        got.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    Ok(words
        .chunks(128 * case.n)
        .map(|c| c.chunks(case.n).map(<[u32]>::to_vec).collect())
        .collect())
}

// The test's own formats, from their definitions (OCP MX: E4M3 bias 7 with S.1111.111 NaN,
// E2M1 bias 1, UE8M0 2^(c−127) with 0xFF NaN).

fn e4m3(c: u8) -> f64 {
    if c & 0x7F == 0x7F {
        return f64::NAN;
    }
    let (e, m) = (i32::from((c >> 3) & 0xF), f64::from(c & 7));
    let v = if e == 0 { m / 8.0 * 2f64.powi(-6) } else { (1.0 + m / 8.0) * 2f64.powi(e - 7) };
    if c & 0x80 != 0 { -v } else { v }
}

fn e2m1(c: u8) -> f64 {
    let v = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0][usize::from(c & 7)];
    if c & 8 != 0 { -v } else { v }
}

fn ue8m0(c: u8) -> f64 {
    if c == 0xFF { f64::NAN } else { 2f64.powi(i32::from(c) - 127) }
}

/// a + b in f64, which must be exact for the rounding to f32 afterwards to be the one
/// rounding of the exact sum (Knuth's TwoSum error term is zero).
fn exact_sum(a: f64, b: f64) -> f64 {
    let s = a + b;
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    assert_eq!(err, 0.0, "test case outside the f64-exact domain: {a:e} + {b:e}");
    s
}

/// The accumulators the steps must leave, [cta][row][column]; NaN as f32::NAN.
fn expected(case: &Case) -> Vec<Vec<Vec<f32>>> {
    let n = case.n;
    let mut acc = vec![vec![0f32; n]; 128 * case.ctas];
    for s in &case.steps {
        let ks = 32 * s.k..32 * s.k + 32;
        for (row, acc_row) in acc.iter_mut().enumerate() {
            let sa = ue8m0((case.sfa[row] >> (8 * s.sfa_id)) as u8);
            for (j, acc) in acc_row.iter_mut().enumerate() {
                let sb = ue8m0((case.sfb[j] >> (8 * s.sfb_id)) as u8);
                // Products are multiples of 2^-10 below 2^12, 32 of them: exact in f64.
                let sum: f64 = ks.clone().map(|k| e4m3(case.a[row][k]) * e2m1(case.b[j][k])).sum();
                let v = sum * sa * sb;
                *acc = if v.is_nan() || (s.enable && !acc.is_finite()) {
                    f32::NAN
                } else if s.enable {
                    exact_sum(f64::from(*acc), v) as f32
                } else {
                    v as f32
                };
            }
        }
    }
    acc.chunks(128).map(<[Vec<f32>]>::to_vec).collect()
}

fn check(case: &Case, what: &str) -> Vec<Vec<Vec<u32>>> {
    let got = run(case).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = expected(case);
    for (c, (g, w)) in got.iter().zip(&want).enumerate() {
        for (r, (g, w)) in g.iter().zip(w).enumerate() {
            for (j, (&g, &w)) in g.iter().zip(w).enumerate() {
                let ok = if w.is_nan() { f32::from_bits(g).is_nan() } else { g == w.to_bits() };
                assert!(
                    ok,
                    "{what}: CTA {c} row {r} column {j}: got {}, want {w}",
                    f32::from_bits(g)
                );
            }
        }
    }
    assert_eq!(got.len(), case.ctas);
    got
}

fn at(got: &[Vec<Vec<u32>>], r: usize, j: usize) -> f32 {
    f32::from_bits(got[0][r][j])
}

#[test]
fn four_mmas_walk_k_each_with_its_scale_bytes() {
    for (n, seed) in [(8, 1), (24, 2), (128, 3), (256, 4)] {
        let case = Case::random(n, 1, seed);
        let got = check(&case, &format!("N {n}"));
        assert!(got[0].iter().flatten().all(|&w| f32::from_bits(w).is_finite()));
        assert!(got[0].iter().flatten().filter(|&&w| w != 0).count() > 100 * n, "N {n}");
    }
    // The A and B bytes chosen independently; enable-input-d false in the middle discards
    // what the first two MMAs summed.
    let mut case = Case::random(64, 1, 5);
    case.steps = walk(|k| (k as u32, 3 - k as u32));
    check(&case, "sfb id 3 - k");
    case.steps[2].enable = false;
    check(&case, "enable false at k = 2");
    // A scale byte read from the wrong position is caught: swapping the bytes of steps 2
    // and 3 in one word changes that row's results.
    let before = run(&case).unwrap();
    let w = case.sfa[9];
    case.sfa[9] = (w & 0xFFFF) | ((w >> 24) << 16) | (((w >> 16) & 0xFF) << 24);
    let after = check(&case, "swapped SFA bytes");
    assert_ne!(before[0][9], after[0][9]);
    assert_eq!(before[0][10], after[0][10]);
}

#[test]
fn rounding_happens_once_per_instruction() {
    let step = |k, enable| Step { k, sfa_id: k as u32, sfb_id: k as u32, enable };
    let mut c = Case::zero(8, vec![step(0, false), step(1, true)]);
    let scale_byte1 = |w: &mut u32, code: u32| *w = (*w & !0xFF00) | (code << 8);
    // Row 0 × B row 0: 1, then two products of 2^-24 (scales 2^-12 · 2^-12): one rounding
    // of 1 + 2^-23 is exact; rounding after each product would stay at 1 (two ties to even).
    c.a[0][0] = 0x38; // 1.0
    c.b[0][0] = 2; // 1.0
    c.a[0][32] = 0x38;
    c.a[0][33] = 0x38;
    c.b[0][32] = 2;
    c.b[0][33] = 2;
    scale_byte1(&mut c.sfa[0], 115);
    scale_byte1(&mut c.sfb[0], 115);
    // Row 1 × B row 1: 1 + 1.5 · 2^-24 rounds to nearest 1 + 2^-23 (truncation: 1).
    c.a[1][0] = 0x38;
    c.b[1][0] = 2;
    c.a[1][32] = 0x3C; // 1.5
    c.b[1][32] = 2;
    scale_byte1(&mut c.sfa[1], 115);
    scale_byte1(&mut c.sfb[1], 115);
    // Row 2 × B row 2, no accumulator: 16 · 448 · 4 = 28672 (ulp 2^-9) and two products of
    // 2^-10 in one MMA: 28672 + 2^-9 once rounded; 28672 in K order.
    for k in 0..16 {
        c.a[2][k] = 0x7E;
        c.b[2][k] = 6;
    }
    for k in 16..18 {
        c.a[2][k] = 0x01; // 2^-9
        c.b[2][k] = 1; // 0.5
    }
    // Row 5 × B row 5: the accumulator 2^-10, then 28672 + 2^-10 from the products: one
    // rounding gives 28672 + 2^-9; rounding the products' sum first (28672, a tie) and then
    // the addition (another tie) gives 28672.
    c.a[5][0] = 0x01;
    c.b[5][0] = 1;
    for k in 32..48 {
        c.a[5][k] = 0x7E;
        c.b[5][k] = 6;
    }
    c.a[5][48] = 0x01;
    c.b[5][48] = 1;
    // Row 3 × B row 3: 448 · 6 · 2^127 · 2^127 overflows to +inf; accumulating into the
    // infinity gives NaN.
    c.a[3][0] = 0x7E;
    c.b[3][0] = 7;
    c.sfa[3] = 0x7F7F_7FFE;
    c.sfb[3] = 0x7F7F_7FFE;
    let got = check(&c, "rounding");
    assert_eq!(at(&got, 0, 0), 1.0 + 2f32.powi(-23));
    assert_eq!(at(&got, 1, 1), 1.0 + 2f32.powi(-23));
    // Row 0 × B row 1: 1 + 2^-24, a tie, goes to the even 1.
    assert_eq!(at(&got, 0, 1), 1.0);
    assert_eq!(at(&got, 2, 2), 28672.0 + 2f32.powi(-9));
    assert_eq!(at(&got, 5, 5), 28672.0 + 2f32.powi(-9));
    assert!(at(&got, 3, 3).is_nan());
    assert_eq!(at(&got, 4, 4).to_bits(), 0, "an exact zero is +0");
    // After the first MMA alone row 3 holds +inf.
    c.steps.truncate(1);
    let got = check(&c, "overflow");
    assert_eq!(at(&got, 3, 3), f32::INFINITY);
    assert_eq!(at(&got, 2, 2), 28672.0 + 2f32.powi(-9));
}

#[test]
fn nan_operands_and_scales_propagate() {
    let mut c = Case::random(16, 1, 7);
    c.steps = vec![
        Step { k: 0, sfa_id: 0, sfb_id: 0, enable: false },
        Step { k: 1, sfa_id: 1, sfb_id: 2, enable: true },
    ];
    let set = |w: &mut u32, byte: u32| *w |= 0xFF << (8 * byte);
    set(&mut c.sfa[5], 0); // used by step 0
    set(&mut c.sfa[6], 3); // never used
    set(&mut c.sfb[7], 2); // used by step 1
    set(&mut c.sfb[8], 0); // used by step 0
    set(&mut c.sfb[9], 1); // never used for B
    c.a[10][5] = 0x7F; // K 5: step 0
    c.a[11][40] = 0xFF; // K 40: step 1
    c.a[12][100] = 0x7F; // K 100: no step
    let got = check(&c, "NaN");
    let nan_row = |r: usize| (0..16).all(|j| at(&got, r, j).is_nan());
    let nan_col = |j: usize| (0..128).all(|r| at(&got, r, j).is_nan());
    assert!(nan_row(5) && nan_row(10) && nan_row(11));
    assert!(nan_col(7) && nan_col(8));
    let finite = |r: usize, j: usize| at(&got, r, j).is_finite();
    assert!((0..16).filter(|&j| j != 7 && j != 8).all(|j| finite(6, j) && finite(12, j)));
    assert!((0..128).filter(|r| ![5, 10, 11].contains(r)).all(|r| finite(r, 9)));
}

#[test]
fn padding_bytes_are_ignored() {
    let mut c = Case::random(32, 1, 11);
    let first = check(&c, "padding");
    for (i, p) in c.pad.iter_mut().enumerate() {
        *p = [(i as u8).wrapping_mul(37) | 0x88; 64];
    }
    assert_eq!(check(&c, "other padding"), first);
}

#[test]
fn scale_vec_1x_is_block32() {
    let mut c = Case::random(40, 1, 13);
    let block32 = check(&c, "block32");
    c.alias = true;
    assert_eq!(check(&c, ".scale_vec::1X"), block32);
}

#[test]
fn b_from_a_padded_tma_load() {
    for (n, seed) in [(8, 17), (136, 19), (256, 23)] {
        let mut c = Case::random(n, 1, seed);
        c.tma = true;
        check(&c, &format!("TMA N {n}"));
    }
}

#[test]
fn a_cta_pair_computes_m256() {
    for (n, seed) in [(16, 29), (256, 31)] {
        let c = Case::random(n, 2, seed);
        let got = check(&c, &format!("cta_group::2 N {n}"));
        assert_ne!(got[0], got[1]);
    }
}

/// The error of a one-MMA run with instruction descriptor `idesc`, or "ok".
fn idesc_result(idesc: u32, ctas: usize) -> String {
    let mut c = Case::random(8 * ctas, ctas, 37);
    c.steps.truncate(1);
    c.idesc = Some(idesc);
    match run(&c) {
        Ok(_) => "ok".into(),
        Err(SimError::Descriptor { descriptor: "instruction", field, .. }) => field.into(),
        Err(e) => format!("other: {e}"),
    }
}

#[test]
fn every_instruction_descriptor_bit_is_checked() {
    const IDESC: u32 = 0x0800_1400 | 1 << 23 | 1 << 17; // M 128, N 8, E4M3 × E2M1, UE8M0
    assert_eq!(idesc_result(IDESC, 1), "ok");
    for bit in 0..32 {
        let want = match bit {
            0 | 1 => "reserved bits 0-1",
            2 => "sparsity (bit 2)",
            3 => "reserved bit 3",
            4 | 5 | 29 | 30 => "ok", // SFB / SFA id: any byte
            6 => "reserved bit 6",
            7..=9 => "A type (bits 7-9)",
            10..=12 => "B type (bits 10-12)",
            13 => "negate A (bit 13)",
            14 => "negate B (bit 14)",
            15 => "transpose A (bit 15)",
            16 => "transpose B (bit 16)",
            // The N field 1 becomes 0, then 3, 5, 9, 17 (N 24 … 136: modelled) and 33 (264).
            17 | 22 => "N (bits 17-22)",
            18..=21 => "ok",
            23 => "scale type (bit 23)",
            24..=26 => "reserved bits 24-26",
            27 | 28 => "M (bits 27-28)",
            _ => "reserved bit 31",
        };
        assert_eq!(idesc_result(IDESC ^ (1 << bit), 1), want, "bit {bit}");
    }
    // The types the simulator does not model: A E5M2 (1) and the 6-bit types, B E4M3 (0)
    // and E2M1 under its mxf4 code (1), the UE4M3 scale type.
    for (idesc, field) in [
        (IDESC | 1 << 7, "A type (bits 7-9)"),
        (IDESC | 3 << 7, "A type (bits 7-9)"),
        (IDESC & !(7 << 10), "B type (bits 10-12)"),
        (IDESC & !(7 << 10) | 1 << 10, "B type (bits 10-12)"),
        (IDESC & !(1 << 23), "scale type (bit 23)"),
        (IDESC & !(3 << 27) | 2 << 27, "M (bits 27-28)"),
    ] {
        assert_eq!(idesc_result(idesc, 1), field, "{idesc:#x}");
    }
    // cta_group::2 needs M = 256.
    const PAIR: u32 = 0x1000_1400 | 1 << 23 | 2 << 17; // M 256, N 16
    assert_eq!(idesc_result(PAIR, 2), "ok");
    assert_eq!(idesc_result(PAIR & !(3 << 27) | 1 << 27, 2), "M (bits 27-28)");
    // ... and an N the pair can split (N 8 is refused there).
    assert_eq!(idesc_result(PAIR & !(63 << 17) | 1 << 17, 2), "N (bits 17-22)");
}

#[test]
fn other_forms_are_refused_when_parsed() {
    let unsupported = |modifiers: &str| {
        let c = Case::zero(8, vec![Step { k: 0, sfa_id: 0, sfb_id: 0, enable: false }]);
        let text = kernel(&c).replace("kind::mxf8f6f4.block_scale.block32", modifiers);
        match parse_module(&text) {
            Err(SimError::Unsupported { opcode, .. }) => assert!(opcode.contains("mxf8f6f4")),
            other => panic!("{modifiers}: expected Unsupported, got {:?}", other.map(|_| ())),
        }
    };
    for m in [
        "kind::mxf8f6f4.block_scale",
        "kind::mxf8f6f4.block_scale.block16",
        "kind::mxf8f6f4.block_scale.scale_vec::2X",
        "kind::mxf8f6f4.block_scale.scale_vec::4X",
        "kind::mxf8f6f4.block32",
        "kind::mxf8f6f4",
        "kind::mxf8f6f4.block_scale.block32.collector::a::fill",
        "kind::mxf8f6f4.block_scale.block32.block32",
    ] {
        unsupported(m);
    }
}
