//! Planted descriptor defects in the generated SM100 GEMM kernels are caught end to end:
//! each mutation of an instruction-descriptor bit, of the A/B or scale-factor
//! shared-memory-descriptor high word, or of the leading byte offset, run through the whole
//! layer in moegen-sim, must give a simulator error or an output that differs from the CPU
//! reference. One 1-CTA and one 2-CTA tactic, a small shape.

use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{MoeTactic, nvfp4_tactics};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::device_layer::{LayerInputs, device_moe_layer};

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

struct Problem {
    shape: MoeShape,
    acts: Nvfp4Activations,
    weights: PreparedWeights,
    routing: Routing,
}

/// H 256, I 256, 4 experts of which 2 local, k 2, 5 tokens.
fn problem() -> Problem {
    let (h, i, local, k, tokens) = (256, 256, 2, 2, 5);
    let shape = MoeShape::new(h, i, ExpertWindow::new(4, 1, local, k).unwrap()).unwrap();
    let mut r = Rng(77);
    let x: Vec<f32> = (0..tokens * h).map(|_| r.normal()).collect();
    let s = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
    let gate: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
    let down: Vec<f32> = (0..local * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
    // Both local experts (1 and 2) get routes in both slots.
    let experts: Vec<i32> = (0..tokens * k).map(|j| 1 + (j % 2) as i32).collect();
    let weights: Vec<f32> = (0..tokens * k).map(|j| 0.25 + (j % k) as f32 * 0.5).collect();
    let gs = nvfp4_global_scale(block_amax(&x)).unwrap();
    let acts = quantize_activations(&x, tokens, h, gs).unwrap();
    let weights_p = prepare_weights(&shape, &up, &gate, &down, gs, 448.0 * 6.0 / 8.0).unwrap();
    Problem { shape, acts, weights: weights_p, routing: Routing { tokens, experts, weights } }
}

/// `ptx` with its one `mov.u32 %rN, <from>;` constant replaced by `to`.
fn with_constant(ptx: &str, from: u32, to: u32) -> String {
    let (from, to) = (format!(", {from:#010x};"), format!(", {to:#010x};"));
    assert_eq!(ptx.matches(&from).count(), 1, "{from}");
    ptx.replace(&from, &to)
}

/// `ptx` with the leading-byte-offset field (`or.b32 …, 65536;` on every descriptor low
/// word) set to `lbo`.
fn with_lbo(ptx: &str, lbo: u32) -> String {
    let mut n = 0;
    let out: Vec<String> = ptx
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("or.b32") && l.ends_with(", 65536;") {
                n += 1;
                l.replace(", 65536;", &format!(", {};", lbo << 16))
            } else {
                l.to_owned()
            }
        })
        .collect();
    assert!(n > 0, "no descriptor low word");
    out.join("\n") + "\n"
}

/// Runs every mutation of `kernel` (a GEMM of `tactic`) and checks each is caught.
fn mutations_are_caught(tactic: MoeTactic, kernel: &str, idesc: u32, mutations: &[Mutation]) {
    let p = problem();
    let inputs =
        LayerInputs { shape: &p.shape, acts: &p.acts, weights: &p.weights, routing: &p.routing };
    let opts = ReferenceOptions::default();
    let want = moe_reference(&p.shape, &p.acts, &p.weights, &p.routing, tactic.tile(), opts)
        .unwrap()
        .output;
    let ptx = moegen_kernels::kernel(kernel).unwrap().ptx;
    // Unmutated, the layer is bit-exact.
    let mut sim = SimBackend::new();
    assert_eq!(device_moe_layer(&mut sim, &inputs, &tactic, opts, 1).unwrap().output, want);
    let (mut errors, mut outputs) = (0, 0);
    for m in mutations {
        let (what, bad) = match *m {
            Mutation::Idesc(mask) => {
                (format!("idesc ^ {mask:#x}"), with_constant(ptx, idesc, idesc ^ mask))
            }
            Mutation::AbHigh(bit) => (
                format!("A/B descriptor bit {}", 32 + bit),
                with_constant(ptx, AB_HIGH, AB_HIGH ^ (1 << bit)),
            ),
            Mutation::SfHigh(bit) => (
                format!("SF descriptor bit {}", 32 + bit),
                with_constant(ptx, SF_HIGH, SF_HIGH ^ (1 << bit)),
            ),
            Mutation::Lbo(lbo) => (format!("LBO {lbo}"), with_lbo(ptx, lbo)),
        };
        let mut sim = SimBackend::new();
        sim.replace_kernel(kernel, &bad).unwrap();
        match device_moe_layer(&mut sim, &inputs, &tactic, opts, 1) {
            Err(_) => errors += 1,
            Ok(run) => {
                assert!(run.output != want, "{kernel}: {what} went unnoticed");
                outputs += 1;
            }
        }
    }
    eprintln!(
        "{kernel}: {errors} mutations refused by the simulator, {outputs} changed the output"
    );
}

const AB_HIGH: u32 = 0x4000_4040;
const SF_HIGH: u32 = 0x0000_4008;

#[derive(Clone, Copy)]
enum Mutation {
    /// Flip instruction-descriptor bits.
    Idesc(u32),
    /// Flip bit `32 + n` of the A and B descriptors (their shared high word).
    AbHigh(u32),
    /// Flip bit `32 + n` of the scale-factor (tcgen05.cp source) descriptors.
    SfHigh(u32),
    /// Set the LBO field of every descriptor.
    Lbo(u32),
}

/// Every instruction-descriptor bit except, with N = 128, the four low N bits (a larger N
/// only adds accumulator columns this kernel never reads: the strictness unit tests show
/// the simulator models them; here N = 120 stands for the N field), every high-word bit of
/// both descriptor kinds except the stride field's (layout changes the simulator models;
/// two of each are kept), and LBO 0 and 2.
fn all_mutations(n128: bool) -> Vec<Mutation> {
    let mut v: Vec<Mutation> = (0..32)
        .filter(|b| !(n128 && (17..=20).contains(b)))
        .map(|b| Mutation::Idesc(1 << b))
        .collect();
    if n128 {
        // N >> 3 from 16 to 15.
        v.push(Mutation::Idesc(0x1F << 17));
    }
    for bit in 14..32 {
        v.push(Mutation::AbHigh(bit));
        v.push(Mutation::SfHigh(bit));
    }
    // Two stride (SBO) flips of each kind: modelled, so the bytes read change.
    v.extend([Mutation::AbHigh(4), Mutation::AbHigh(7), Mutation::SfHigh(3), Mutation::SfHigh(5)]);
    v.extend([Mutation::Lbo(0), Mutation::Lbo(2)]);
    v
}

#[test]
fn descriptor_mutations_of_the_one_cta_gemm1_are_caught() {
    let t = nvfp4_tactics()[0];
    assert_eq!(t.to_string(), "t128:gemm1_m128n128_c1x1:gemm2_m128n128_c1x1");
    mutations_are_caught(
        t,
        "moegen_sm100_nvfp4_gemm1_t128_n128_c1x1",
        0x0820_0480,
        &all_mutations(true),
    );
}

#[test]
fn descriptor_mutations_of_the_two_cta_gemm2_are_caught() {
    let t = nvfp4_tactics()[10];
    assert_eq!(t.to_string(), "t256:gemm1_m256n128_c2x1:gemm2_m256n256_c2x1");
    mutations_are_caught(
        t,
        "moegen_sm100_nvfp4_gemm2_t256_n256_c2x1",
        0x1040_0480,
        &all_mutations(false),
    );
}
