//! Runs the differential corpus (`moegen_sm90_corpus_*`) on a backend and returns each case's
//! output bytes, so a GPU and the simulator can be compared byte for byte.

use moegen_dsl::abi::{CorpusKernel, KernelId};
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
    Ok(out)
}

/// bf16 bits of `x` (nearest-even).
fn half_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}
