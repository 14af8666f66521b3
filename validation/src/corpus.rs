//! Runs the differential corpus (`moegen_sm90_corpus_*`) on a backend and returns each case's
//! output bytes, so a GPU and the simulator can be compared byte for byte.

use moegen_dsl::abi::sm90_weights::{
    SCALE_TILE_BYTES, TILE_BYTES, place_code, scale_position, value_position,
};
use moegen_dsl::abi::{CorpusKernel, KernelId, WeightFormat};
use moegen_dsl::formats::{e2m1_to_f32, e4m3_to_f32};
use moegen_runtime::backend::{Backend, KernelArg, TensorMapSpec, TmaElement};
use moegen_runtime::device_ops::{DeviceOpError, find_kernel, run};
use moegen_runtime::launch::{Bindings, GridInputs};

/// One case's name and output bytes.
pub type CaseOutput = (String, Vec<u8>);

/// Runs one corpus kernel (one cluster) with positional arguments, checked against its ABI.
fn launch(
    b: &mut dyn Backend,
    which: CorpusKernel,
    args: Vec<KernelArg>,
) -> Result<(), DeviceOpError> {
    let k = find_kernel(&KernelId::Corpus(which))?;
    run(b, k, &Bindings::new().positional(args), &GridInputs::default())
}

/// Deterministic input bytes.
fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 11) as u8
        })
        .collect()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// ALU operands: specials (±0, ±inf, NaN, subnormals, ties, large) then a spread of values.
pub fn alu_inputs() -> (Vec<f32>, Vec<f32>, Vec<u32>) {
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.5,
        2.5,
        3.5,
        -2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        -1e-45,
        448.0,
        464.0,
        1e30,
        0.1,
    ];
    let mut a = Vec::with_capacity(64);
    let mut b = Vec::with_capacity(64);
    for i in 0..64 {
        a.push(if i < 16 { specials[i] } else { (i as f32 - 40.0) * 1.37 });
        b.push(if i < 16 { specials[15 - i] } else { (i as f32) / 7.0 - 3.0 });
    }
    let u: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(0x9E37_79B9) ^ (i << 3)).collect();
    (a, b, u)
}

/// Runs every corpus kernel; TMA for several box positions (inside, across the far edges,
/// across the near edges with negative coordinates).
pub fn run_corpus(b: &mut dyn Backend) -> Result<Vec<CaseOutput>, DeviceOpError> {
    run_corpus_logged(b, &mut |_| {})
}

/// [`run_corpus`], calling `log` with each kernel's name before it runs.
pub fn run_corpus_logged(
    b: &mut dyn Backend,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<CaseOutput>, DeviceOpError> {
    let mut out = Vec::new();
    // ALU.
    log("corpus_alu");
    let (a, bb, u) = alu_inputs();
    let pa = b.upload_new(&f32s(&a))?;
    let pb = b.upload_new(&f32s(&bb))?;
    let pu = b.upload_new(&u.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())?;
    let po = b.alloc(64 * 64)?;
    launch(
        b,
        CorpusKernel::Alu,
        vec![KernelArg::Ptr(pa), KernelArg::Ptr(pb), KernelArg::Ptr(pu), KernelArg::Ptr(po)],
    )?;
    out.push(("corpus_alu".to_owned(), b.download(po, 64 * 64)?));
    // Warp data exchange and named barriers.
    log("corpus_warp");
    let input: Vec<u8> = pattern(128 * 4, 3);
    let pi = b.upload_new(&input)?;
    let po = b.alloc(128 * 64)?;
    launch(b, CorpusKernel::Warp, vec![KernelArg::Ptr(pi), KernelArg::Ptr(po)])?;
    out.push(("corpus_warp".to_owned(), b.download(po, 128 * 64)?));
    // cp.async pipeline.
    log("corpus_pipeline");
    let src = b.upload_new(&pattern(8 * 512, 7))?;
    let po = b.alloc(64 * 4)?;
    launch(b, CorpusKernel::Pipeline, vec![KernelArg::Ptr(src), KernelArg::Ptr(po)])?;
    out.push(("corpus_pipeline".to_owned(), b.download(po, 64 * 4)?));
    // TMA swizzles with out-of-bounds boxes, and a tile store.
    log("corpus_tma");
    let (w, h) = (208u64, 40u64);
    let tensor = b.upload_new(&pattern((w * h) as usize, 11))?;
    for (c0, c1, s0, s1) in
        [(0i32, 0i32, 0u32, 0u32), (64, 8, 64, 8), (144, 36, 144, 36), (-16, -4, 80, 35)]
    {
        let mut args = Vec::new();
        for i in 0..4u32 {
            let spec = TensorMapSpec {
                element: TmaElement::U8,
                address: tensor,
                dims: vec![w, h],
                strides: vec![w],
                box_dims: vec![16 << i, 8],
                swizzle: if i == 0 { 0 } else { 16 << i },
            };
            args.push(KernelArg::TensorMap(Box::new(b.encode_tensor_map(&spec)?)));
        }
        let target = b.upload_new(&vec![0xA5u8; (w * h) as usize])?;
        let spec = TensorMapSpec {
            element: TmaElement::U8,
            address: target,
            dims: vec![w, h],
            strides: vec![w],
            box_dims: vec![128, 8],
            swizzle: 128,
        };
        args.push(KernelArg::TensorMap(Box::new(b.encode_tensor_map(&spec)?)));
        let po = b.alloc(4096)?;
        args.extend([
            KernelArg::U32(c0 as u32),
            KernelArg::U32(c1 as u32),
            KernelArg::U32(s0),
            KernelArg::U32(s1),
            KernelArg::Ptr(po),
        ]);
        launch(b, CorpusKernel::Tma, args)?;
        // Only the box bytes: the rest of each 1 KiB region is uninitialized shared memory.
        let dump = b.download(po, 4096)?;
        let boxes: Vec<u8> =
            (0..4).flat_map(|i| dump[1024 * i..1024 * i + (16 << i) * 8].to_vec()).collect();
        out.push((format!("corpus_tma boxes at ({c0}, {c1})"), boxes));
        out.push((
            format!("corpus_tma store at ({s0}, {s1})"),
            b.download(target, (w * h) as usize)?,
        ));
    }
    // Cluster multicast, remote arrive, bulk reduce-add, red/atom.
    log("corpus_cluster");
    // bf16 values of moderate size so the two reduce-adds round.
    let src: Vec<u8> = (0..512u32)
        .flat_map(|i| half_bits(((i % 37) as f32 - 18.0) * 0.173).to_le_bytes())
        .collect();
    let tensor = b.upload_new(&src)?;
    let init: Vec<u8> =
        (0..512u32).flat_map(|i| half_bits((i as f32) * 0.011 - 2.0).to_le_bytes()).collect();
    let po = b.upload_new(&init)?;
    let counters = b.alloc(8)?;
    let copies = b.alloc(2048)?;
    let spec = TensorMapSpec {
        element: TmaElement::U16,
        address: tensor,
        dims: vec![256, 2],
        strides: vec![512],
        box_dims: vec![256, 2],
        swizzle: 0,
    };
    let args = vec![
        KernelArg::TensorMap(Box::new(b.encode_tensor_map(&spec)?)),
        KernelArg::Ptr(po),
        KernelArg::Ptr(counters),
        KernelArg::Ptr(copies),
    ];
    launch(b, CorpusKernel::Cluster, args)?;
    out.push(("corpus_cluster output".to_owned(), b.download(po, 1024)?));
    out.push(("corpus_cluster counters".to_owned(), b.download(counters, 8)?));
    out.push(("corpus_cluster bulk copies".to_owned(), b.download(copies, 2048)?));
    // wgmma: the layout operands (every sum exact) and the rounding-sensitive ones.
    log("corpus_wgmma");
    for (which, ops) in [("layouts", WgmmaOperands::new()), ("wide", WgmmaOperands::wide())] {
        for (name, bytes) in run_wgmma(b, &ops)? {
            out.push((format!("{name} ({which})"), bytes));
        }
    }
    Ok(out)
}

/// bf16 bits of `x` (nearest-even).
fn half_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// Tokens (the wgmma N) of the wgmma corpus case.
pub const WGMMA_TOKENS: usize = 32;
/// Threads (one warpgroup) of the wgmma corpus case.
const WGMMA_THREADS: usize = 128;

/// The wgmma case's operands: a 64 × 64 NVFP4 weight tile as E2M1 codes and one UE4M3
/// scale per row and K16 step, and `WGMMA_TOKENS` × 64 bf16 activations.
///
/// [`WgmmaOperands::new`] (the layout case): every code appears (code 1, 0.5, passes
/// through a bf16 subnormal in the kernels' dequantization); rows 0–15 have subnormal E4M3
/// scales, the others normal ones within a factor 32 per row; activations are multiples of
/// 0.5 up to 3. So every dot product is a sum of at most 2^18 multiples of its smallest
/// term: exact in f32, however the hardware orders or aligns the additions.
///
/// [`WgmmaOperands::wide`] (the rounding case): scales over the whole UE4M3 range and
/// activations over 2^−12 … 2^12, so the tensor cores' alignment and truncation
/// ([`h200_wgmma_k16`]) decide most low bits.
pub struct WgmmaOperands {
    /// E2M1 codes `[64][64]`.
    pub codes: Vec<[u8; 64]>,
    /// UE4M3 scale codes `[64][4]`.
    pub scales: Vec<[u8; 4]>,
    /// Activations `[WGMMA_TOKENS][64]`.
    pub x: Vec<f32>,
}

impl WgmmaOperands {
    /// The fixed operands.
    pub fn new() -> Self {
        let bytes = pattern(64 * 64 + 64 * 4 * 2 + WGMMA_TOKENS * 64, 21);
        let mut it = bytes.into_iter();
        let mut next = || it.next().unwrap_or(0);
        let codes = (0..64)
            .map(|m| {
                let mut row = [0u8; 64];
                for (k, c) in row.iter_mut().enumerate() {
                    *c = ((m * 7 + k * 3 + usize::from(next())) % 16) as u8;
                }
                row
            })
            .collect();
        let scales = (0..64)
            .map(|m| {
                let mut row = [0u8; 4];
                for s in &mut row {
                    let (a, b) = (next(), next());
                    *s = if m < 16 { 1 + a % 7 } else { ((5 + a % 5) << 3) | (b % 8) };
                }
                row
            })
            .collect();
        const XS: [f32; 11] = [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 3.0, -3.0];
        let x = (0..WGMMA_TOKENS * 64).map(|_| XS[usize::from(next()) % XS.len()]).collect();
        Self { codes, scales, x }
    }

    /// The rounding case: every UE4M3 scale code but NaN, bf16 activations of every sign and
    /// mantissa with exponents −12 … 12.
    pub fn wide() -> Self {
        let bytes = pattern(64 * 64 + 64 * 4 + WGMMA_TOKENS * 64 * 3, 33);
        let mut it = bytes.into_iter();
        let mut next = || it.next().unwrap_or(0);
        let codes = (0..64)
            .map(|_| {
                let mut row = [0u8; 64];
                for c in &mut row {
                    *c = next() % 16;
                }
                row
            })
            .collect();
        let scales = (0..64)
            .map(|_| {
                let mut row = [0u8; 4];
                for s in &mut row {
                    *s = 1 + next() % 0x7E;
                }
                row
            })
            .collect();
        let x = (0..WGMMA_TOKENS * 64)
            .map(|_| {
                let (e, m, sign) = (next() % 25, next() & 0x7F, next() & 1);
                let bits =
                    (u32::from(sign) << 15) | ((127 - 12 + u32::from(e)) << 7) | u32::from(m);
                f32::from_bits(bits << 16)
            })
            .collect();
        Self { codes, scales, x }
    }

    /// Weight (m, k): e2m1 · scale.
    pub fn weight(&self, m: usize, k: usize) -> f32 {
        e2m1_to_f32(self.codes[m][k]) * e4m3_to_f32(self.scales[m][k / 16])
    }

    /// The kernel's `w` argument: the fragment tile, then the scale tile
    /// (`abi::sm90_weights`).
    pub fn w_bytes(&self) -> Vec<u8> {
        let mut w = vec![0u8; TILE_BYTES + SCALE_TILE_BYTES];
        for m in 0..64 {
            for k in 0..64 {
                if let Some((byte, bits)) = value_position(64, 64, m, k) {
                    let word = u32::from_le_bytes([w[byte], w[byte + 1], w[byte + 2], w[byte + 3]]);
                    let word = place_code(word, bits, self.codes[m][k]);
                    w[byte..byte + 4].copy_from_slice(&word.to_le_bytes());
                }
                if k % 16 == 0
                    && let Some(o) = scale_position(WeightFormat::Nvfp4, 64, 64, m, k)
                {
                    w[TILE_BYTES + o] = self.scales[m][k / 16];
                }
            }
        }
        w
    }

    /// The kernel's `x` argument, bf16 (exact).
    pub fn x_bytes(&self) -> Vec<u8> {
        self.x.iter().flat_map(|&v| half_bits(v).to_le_bytes()).collect()
    }

    /// The two dumps the kernel must produce if the wgmma A-fragment layout is the one
    /// `abi::sm90_weights` assumes, the accumulator layout the one the epilogues assume, the
    /// GMMA descriptor addresses the 128B-swizzled tile, `mul.rn.bf16x2` keeps bf16
    /// subnormals, and each K16 step adds as [`h200_wgmma_k16`]: per thread t (warp w,
    /// lane l), A register k of K16 step j holds weights (16w + l/4 + 8·(k % 2), 16j +
    /// 2·(l % 4) + 8·(k / 2) + {0, 1}) as bf16 (low half first); accumulator register
    /// 4i + 2·v1 + v0 holds D(16w + l/4 + 8·v1, 8i + 2·(l % 4) + v0) with D = W · Xᵀ.
    pub fn expected(&self) -> Vec<CaseOutput> {
        // Four K16 steps from a zero accumulator (the first wgmma has scale-d false).
        let d = |m: usize, n: usize| -> f32 {
            (0..4).fold(0f32, |acc, j| {
                let a: [f32; 16] = std::array::from_fn(|k| self.weight(m, 16 * j + k));
                let b: [f32; 16] = std::array::from_fn(|k| self.x[n * 64 + 16 * j + k]);
                h200_wgmma_k16(acc, &a, &b)
            })
        };
        let mut acc = Vec::with_capacity(WGMMA_THREADS * WGMMA_TOKENS / 2 * 4);
        let mut a = Vec::with_capacity(WGMMA_THREADS * 16 * 4);
        for t in 0..WGMMA_THREADS {
            let (w, l) = (t / 32, t % 32);
            for e in 0..WGMMA_TOKENS / 2 {
                let (i, v0, v1) = (e / 4, e % 2, (e / 2) % 2);
                let v = d(16 * w + l / 4 + 8 * v1, 8 * i + 2 * (l % 4) + v0);
                acc.extend(v.to_le_bytes());
            }
            for j in 0..4 {
                for k in 0..4 {
                    let row = 16 * w + l / 4 + 8 * (k % 2);
                    let col = 16 * j + 2 * (l % 4) + 8 * (k / 2);
                    let lo = u32::from(half_bits(self.weight(row, col)));
                    let hi = u32::from(half_bits(self.weight(row, col + 1)));
                    a.extend((lo | (hi << 16)).to_le_bytes());
                }
            }
        }
        vec![
            ("corpus_wgmma accumulators".to_owned(), acc),
            ("corpus_wgmma A fragments".to_owned(), a),
        ]
    }
}

impl Default for WgmmaOperands {
    fn default() -> Self {
        Self::new()
    }
}

/// The exponent of a normal value's leading bit (from its f32 bits).
fn exponent(v: f32) -> i32 {
    ((v.to_bits() >> 23) & 0xFF) as i32 - 127
}

/// One `wgmma …k16.f32.bf16.bf16` step on an H200 for one accumulator element: `acc` plus
/// the 16 products of `a` and `b` (bf16 values, normal or zero; `acc` a normal f32 or
/// zero), as measured (docs/hopper.md): the terms are aligned to the largest *nominal*
/// exponent — a product's is the sum of its operands' exponents, not its own leading bit,
/// the accumulator's its own — each is truncated toward zero to a multiple of
/// 2^(max − 25), the truncated terms are summed exactly, and the sum is truncated toward
/// zero to an f32. 153 600 random steps with exponents spread over ±24 matched it on every
/// bit; the exact sum rounded to nearest (the CPU reference's model) matched 60%.
pub fn h200_wgmma_k16(acc: f32, a: &[f32; 16], b: &[f32; 16]) -> f32 {
    let mut terms: Vec<(f64, i32)> = a
        .iter()
        .zip(b)
        .filter(|(x, y)| **x != 0.0 && **y != 0.0)
        .map(|(&x, &y)| (f64::from(x) * f64::from(y), exponent(x) + exponent(y)))
        .collect();
    if acc != 0.0 {
        terms.push((f64::from(acc), exponent(acc)));
    }
    let Some(emax) = terms.iter().map(|t| t.1).max() else { return 0.0 };
    let q = emax - 25;
    // Each term is below 2^(max + 2) and a bf16 product or an f32: exact in f64 when
    // scaled by 2^−q, and its multiples of 2^q fit an i64 many times over.
    let sum: i64 = terms.iter().map(|&(v, _)| (v * 2f64.powi(-q)).trunc() as i64).sum();
    let mag = sum.unsigned_abs();
    let bits = 64 - mag.leading_zeros() as i32;
    let kept = if bits > 24 { (mag >> (bits - 24)) << (bits - 24) } else { mag };
    let v = kept as f64 * 2f64.powi(q);
    (if sum < 0 { -v } else { v }) as f32
}

/// Runs the wgmma corpus kernel on `ops` and returns its two dumps, to compare with
/// [`WgmmaOperands::expected`] and between backends.
pub fn run_wgmma(
    b: &mut dyn Backend,
    ops: &WgmmaOperands,
) -> Result<Vec<CaseOutput>, DeviceOpError> {
    let k = find_kernel(&KernelId::Corpus(CorpusKernel::Wgmma))?;
    let pw = b.upload_new(&ops.w_bytes())?;
    let px = b.upload_new(&ops.x_bytes())?;
    let acc_bytes = WGMMA_THREADS * WGMMA_TOKENS / 2 * 4;
    let a_bytes = WGMMA_THREADS * 16 * 4;
    let po = b.alloc(acc_bytes)?;
    let pa = b.alloc(a_bytes)?;
    let args = vec![KernelArg::Ptr(pw), KernelArg::Ptr(px), KernelArg::Ptr(po), KernelArg::Ptr(pa)];
    run(b, k, &Bindings::new().positional(args), &GridInputs::default())?;
    Ok(vec![
        ("corpus_wgmma accumulators".to_owned(), b.download(po, acc_bytes)?),
        ("corpus_wgmma A fragments".to_owned(), b.download(pa, a_bytes)?),
    ])
}
