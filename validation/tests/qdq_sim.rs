//! Hopper's A4 activation step, `qdq_nvfp4`, run in moegen-sim against the CPU reference's
//! `sm90_activations`: bit-identical bf16 (the same kernel matched on an H200:
//! docs/hopper.md).

use half::bf16;
use moegen_dsl::ActivationFormat;
use moegen_dsl::abi::{Buffer, KernelId, Scalar, SimtFamily, SimtTarget};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::{find_kernel, run};
use moegen_runtime::launch::{Bindings, GridInputs};
use moegen_runtime::reference::sm90_activations;

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

#[test]
fn qdq_matches_the_cpu_quantize_dequantize_bit_for_bit() {
    let (tokens, hidden) = (7usize, 256usize);
    let mut r = Rng(91);
    let mut x: Vec<bf16> = (0..tokens * hidden)
        .map(|i| {
            let u = (r.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            bf16::from_f32(u * (1 + i % 37) as f32)
        })
        .collect();
    // Zeros, ties at the E2M1 midpoints, a block of subnormal-scale values, a large one.
    for (i, v) in [0.0f32, -0.0, 0.25, 0.75, 5.0, -5.0, 1e-30, 448.0].iter().enumerate() {
        x[i] = bf16::from_f32(*v);
    }
    for v in &mut x[32..48] {
        *v = bf16::from_f32(1e-6);
    }
    let g = 448.0 * 6.0 / 40.0;
    let want = sm90_activations(&x, tokens, hidden, ActivationFormat::Nvfp4, g).unwrap();

    let mut sim = SimBackend::hopper();
    let k =
        find_kernel(&KernelId::Simt { family: SimtFamily::QdqNvfp4, target: SimtTarget::Sm90a })
            .unwrap();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let d_x = sim.upload_new(&bytes).unwrap();
    let d_out = sim.alloc(tokens * hidden * 2).unwrap();
    let d_g = sim.upload_new(&g.to_le_bytes()).unwrap();
    let bind = Bindings::new()
        .buffer(Buffer::ActivationsBf16, d_x)
        .buffer(Buffer::ActivationsDequantized, d_out)
        .buffer(Buffer::ActivationGlobalScale, d_g)
        .scalar(Scalar::Tokens, tokens as u64)
        .unwrap()
        .scalar(Scalar::Hidden, hidden as u64)
        .unwrap();
    let grid = GridInputs { tokens: tokens as u64, hidden: hidden as u64, ..Default::default() };
    run(&mut sim, k, &bind, &grid).unwrap();
    let got = sim.download(d_out, tokens * hidden * 2).unwrap();
    let want: Vec<u8> = want.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    assert_eq!(got, want);
}
