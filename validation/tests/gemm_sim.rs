//! The generated SM100 GEMM kernels, end to end in moegen-sim (routing sort → GEMM1 →
//! GEMM2 [→ deterministic reduction]), against the CPU reference.

use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{EpilogueRecipe, FinalizeMode, MoeTactic, TileSize, nvfp4_tactics};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::device_layer::{DeviceRun, LayerInputs, device_moe_layer};

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

struct Problem {
    shape: MoeShape,
    acts: Nvfp4Activations,
    weights: PreparedWeights,
    routing: Routing,
}

fn problem(tokens: usize, seed: u64, route: &dyn Fn(&mut Rng, usize, usize) -> i32) -> Problem {
    problem_with(
        Dims { h: 512, i: 256, experts: 8, offset: 2, local: 4, k: 2 },
        tokens,
        seed,
        route,
    )
}

/// Layer dimensions of a test problem.
struct Dims {
    h: usize,
    i: usize,
    experts: usize,
    offset: usize,
    local: usize,
    k: usize,
}

fn problem_with(
    d: Dims,
    tokens: usize,
    seed: u64,
    route: &dyn Fn(&mut Rng, usize, usize) -> i32,
) -> Problem {
    let Dims { h, i, experts, offset, local, k } = d;
    let shape = MoeShape::new(h, i, ExpertWindow::new(experts, offset, local, k).unwrap()).unwrap();
    let mut r = Rng(seed);
    let x: Vec<f32> = (0..tokens * h).map(|_| r.normal()).collect();
    let s = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
    let gate: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
    let down: Vec<f32> = (0..local * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
    let experts: Vec<i32> = (0..tokens * k).map(|j| route(&mut r, j / k, j % k)).collect();
    let weights: Vec<f32> = (0..tokens * k).map(|j| 0.125 + (j % k) as f32 * 0.25).collect();
    let gs_x = nvfp4_global_scale(block_amax(&x)).unwrap();
    let acts = quantize_activations(&x, tokens, h, gs_x).unwrap();
    let weights_p = prepare_weights(&shape, &up, &gate, &down, gs_x, 448.0 * 6.0 / 8.0).unwrap();
    Problem { shape, acts, weights: weights_p, routing: Routing { tokens, experts, weights } }
}

impl Problem {
    fn inputs(&self) -> LayerInputs<'_> {
        LayerInputs {
            shape: &self.shape,
            acts: &self.acts,
            weights: &self.weights,
            routing: &self.routing,
        }
    }
}

fn random_routes(r: &mut Rng, _t: usize, slot: usize) -> i32 {
    (r.next() % 4) as i32 + 4 * slot as i32
}

/// Runs one tactic and checks every output against the reference.
fn check(p: &Problem, tactic: &MoeTactic, finalize: FinalizeMode, clusters: u32) -> DeviceRun {
    check_with(p, tactic, ReferenceOptions { finalize, ..Default::default() }, clusters)
}

/// [`check`] with every reference option explicit (e.g. the epilogue recipe).
fn check_with(p: &Problem, tactic: &MoeTactic, opts: ReferenceOptions, clusters: u32) -> DeviceRun {
    let want =
        moe_reference(&p.shape, &p.acts, &p.weights, &p.routing, tactic.tile(), opts).unwrap();
    let mut sim = SimBackend::new();
    let got = device_moe_layer(&mut sim, &p.inputs(), tactic, opts, clusters)
        .unwrap_or_else(|e| panic!("{tactic}: {e}"));
    let live_tiles = want.sort.num_non_exiting_tiles as u64;
    if live_tiles > 0 {
        // Both GEMMs ran their MMAs: K/64 per tile and N block (2-CTA counts one per pair).
        let (h, i) = (p.shape.hidden as u64, p.shape.intermediate as u64);
        // A last, partial N block counts whole, and so does a cluster's block wholly past
        // H; a partial last K stage issues only its own MMAs.
        let blocks = |n_dim: u64, g: &moegen_dsl::GemmTactic| {
            let cn = u64::from(g.cluster()[1]);
            n_dim.div_ceil(u64::from(g.mma_tiler()[1])).div_ceil(cn) * cn
        };
        let per_tile =
            blocks(2 * i, tactic.gemm1()) * (h / 64) + blocks(h, tactic.gemm2()) * (i / 64);
        assert_eq!(sim.mma_instructions, live_tiles * per_tile, "{tactic}: MMA count");
    }
    assert_eq!(got.sort, want.sort, "{tactic}: routing sort");
    let i = p.shape.intermediate;
    let mut rows_checked = 0;
    for row in 0..want.gemm1.rows {
        if want.sort.route_of_row(row, p.shape.top_k()).is_none() {
            continue;
        }
        rows_checked += 1;
        assert_eq!(
            got.gemm1.packed[row * i / 2..(row + 1) * i / 2],
            want.gemm1.packed[row * i / 2..(row + 1) * i / 2],
            "{tactic}: GEMM1 row {row}"
        );
        for c in 0..i / 16 {
            let o = want.gemm1.scale_layout.offset(row, c).unwrap();
            assert_eq!(
                got.gemm1.scales[o], want.gemm1.scales[o],
                "{tactic}: GEMM1 scale row {row} col {c}"
            );
        }
    }
    let local_routes = want.sort.expanded_idx_to_permuted_idx.iter().filter(|&&r| r >= 0).count();
    assert_eq!(rows_checked, local_routes);
    // k = 2: the bulk reduce-add's order cannot change the result, so both modes are exact.
    assert_eq!(got.output, want.output, "{tactic}: output");
    got
}

#[test]
fn one_tactic_end_to_end() {
    let p = problem(5, 1, &random_routes);
    let t = nvfp4_tactics()[0];
    let run = check(&p, &t, FinalizeMode::BulkReduceAdd, 2);
    assert!(run.output.iter().any(|v| v.to_f32() != 0.0));
}

#[test]
fn every_tactic_at_every_batch_size() {
    for (n, clusters) in [(1, 1), (5, 2), (64, 3), (300, 2)] {
        let p = problem(n, 10 + n as u64, &random_routes);
        for t in nvfp4_tactics() {
            check(&p, &t, FinalizeMode::BulkReduceAdd, clusters);
        }
    }
}

#[test]
fn exact_recipe_is_bit_exact_for_every_tactic() {
    // The IEEE-only epilogue (the `_exact` GEMM1 kernels) against the reference's Exact
    // recipe, as strictly as the default Fast recipe.
    let opts = ReferenceOptions { recipe: EpilogueRecipe::Exact, ..Default::default() };
    for (n, clusters) in [(5, 1), (300, 2)] {
        let p = problem(n, 60 + n as u64, &random_routes);
        for t in nvfp4_tactics() {
            check_with(&p, &t, opts, clusters);
        }
    }
}

#[test]
fn the_recipes_agree_closely() {
    // Fast and Exact round h differently (a few ulp), so an E2M1 code can move by one step
    // where h sits at a rounding boundary; the outputs stay within quantization noise.
    let p = problem(64, 71, &random_routes);
    let t = nvfp4_tactics()[0];
    let det = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let fast = check_with(&p, &t, det, 2);
    let exact = check_with(&p, &t, ReferenceOptions { recipe: EpilogueRecipe::Exact, ..det }, 2);
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in fast.output.iter().zip(&exact.output) {
        let (a, b) = (f64::from(a.to_f32()), f64::from(b.to_f32()));
        num += (a - b) * (a - b);
        den += b * b;
    }
    let rel = (num / den.max(1e-30)).sqrt();
    assert!(rel < 0.02, "Fast vs Exact relative L2 {rel}");
}

#[test]
fn deterministic_variant_is_exact_and_repeatable() {
    let p = problem(64, 7, &random_routes);
    for t in nvfp4_tactics() {
        let a = check(&p, &t, FinalizeMode::Deterministic, 2);
        let b = check(&p, &t, FinalizeMode::Deterministic, 1);
        assert_eq!(a.output, b.output, "{t}: run to run");
    }
}

#[test]
fn routing_edge_cases() {
    let tactics = nvfp4_tactics();
    let some = [tactics[0], tactics[7], tactics[8], tactics[15]];
    // All tokens on one local expert (the other slot non-local).
    let p = problem(300, 21, &|_, _, slot| if slot == 0 { 3 } else { 0 });
    // Only two of the four local experts used.
    let q = problem(64, 22, &|_, _, slot| if slot == 0 { 2 } else { 5 });
    // No local routes at all: every GEMM exits at once and the output stays zero.
    let z = problem(16, 23, &|r, _, slot| [0, 1, 6, 7][(r.next() % 2) as usize + 2 * slot]);
    for t in some {
        check(&p, &t, FinalizeMode::BulkReduceAdd, 2);
        check(&q, &t, FinalizeMode::Deterministic, 2);
        let run = check(&z, &t, FinalizeMode::BulkReduceAdd, 2);
        assert_eq!(run.sort.num_non_exiting_tiles, 0);
        assert!(run.output.iter().all(|v| v.to_f32() == 0.0));
    }
}

#[test]
fn fuzzed_schedules_give_the_same_bits() {
    let p = problem(64, 31, &random_routes);
    let opts = ReferenceOptions::default();
    for t in [nvfp4_tactics()[3], nvfp4_tactics()[13]] {
        let want =
            moe_reference(&p.shape, &p.acts, &p.weights, &p.routing, t.tile(), opts).unwrap();
        for seed in [1, 2, 3] {
            let mut sim = SimBackend::fuzzed(seed);
            let got = device_moe_layer(&mut sim, &p.inputs(), &t, opts, 2).unwrap();
            assert_eq!(got.output, want.output, "{t} seed {seed}");
        }
    }
}

/// `ptx` with the `nth` line after the first line starting with `label` that contains
/// `pattern` rewritten by `f`.
fn mutate_after(
    ptx: &str,
    label: &str,
    pattern: &str,
    nth: usize,
    f: &dyn Fn(&str) -> String,
) -> String {
    let mut seen_label = false;
    let mut count = 0;
    let mut done = false;
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.lines() {
        if line.starts_with(label) {
            seen_label = true;
        }
        if seen_label && !done && line.contains(pattern) {
            if count == nth {
                out.push_str(&f(line));
                out.push('\n');
                done = true;
                continue;
            }
            count += 1;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(done, "no line {nth} with `{pattern}` after `{label}`");
    out
}

#[test]
fn planted_defects_in_the_gemm_kernels_are_caught() {
    let p = problem(64, 41, &random_routes);
    let t = nvfp4_tactics()[0];
    let opts = ReferenceOptions::default();
    let want =
        moe_reference(&p.shape, &p.acts, &p.weights, &p.routing, TileSize::T128, opts).unwrap();
    let g2 = "moegen_sm100_nvfp4_gemm2_t128_n128_c1x1";
    let ptx = moegen_kernels::kernel(g2).unwrap().ptx;
    let defects = [
        // The SFA atom of the second K block copied to the wrong TMEM column.
        (
            "wrong scale column",
            mutate_after(ptx, "L_mma_", "+4], %rd", 0, &|l| l.replace("+4]", "+8]")),
        ),
        // The MMA warp no longer waits for the stage to be full.
        (
            "dropped mbarrier wait",
            mutate_after(ptx, "L_mma_", "mbarrier.try_wait.parity", 1, &|l| {
                let p = l.split_whitespace().nth(1).unwrap_or("%p0,").trim_end_matches(',');
                format!("\tsetp.eq.u32 {p}, 0, 0;")
            }),
        ),
        // Rows up to and including mn_limit are treated as valid (the third compare of the
        // epilogue's row prefetch: unit in range, tile live, row below the limit).
        (
            "off-by-one mn_limit",
            mutate_after(ptx, "L_epilogue_", "setp.lt.u32", 2, &|l| {
                l.replace("setp.lt.u32", "setp.le.u32")
            }),
        ),
    ];
    for (what, bad) in defects {
        assert_ne!(bad, ptx);
        let mut sim = SimBackend::new();
        sim.replace_kernel(g2, &bad).unwrap();
        match device_moe_layer(&mut sim, &p.inputs(), &t, opts, 2) {
            Ok(run) => assert_ne!(run.output, want.output, "{what} went unnoticed"),
            Err(e) => eprintln!("{what}: caught as an error: {e}"),
        }
    }
}

#[test]
fn other_shapes_and_top_k_4() {
    // H 768, I 512 (3 N tiles of 256 in GEMM2: the 2-wide clusters at N = 256 end with a
    // tile past H), 16 experts of which 6 local at offset 5, k = 4 with distinct experts per
    // token.
    let d = Dims { h: 768, i: 512, experts: 16, offset: 5, local: 6, k: 4 };
    let p = problem_with(d, 24, 51, &|r, _, slot| (4 * slot as u64 + r.next() % 4) as i32);
    let opts_det = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let (h, i) = (768u64, 512u64);
    let mut ran = 0;
    for t in nvfp4_tactics() {
        if !t.applies_to(1, i, h) {
            // The guard's verdict is what the device path enforces too.
            let mut sim = SimBackend::new();
            assert!(device_moe_layer(&mut sim, &p.inputs(), &t, opts_det, 2).is_err(), "{t}");
            continue;
        }
        ran += 1;
        // Deterministic finalize: exact.
        check(&p, &t, FinalizeMode::Deterministic, 3);
        // Bulk reduce-add with k = 4: the simulator adds routes in permuted (expert) order,
        // the reference in slot order; each of the k − 1 extra bf16 roundings moves a partial
        // sum by at most half an ulp (2^-8 relative: bf16 keeps 8 bits) of a partial sum ≤ Σ|c|.
        let opts = ReferenceOptions::default();
        let want =
            moe_reference(&p.shape, &p.acts, &p.weights, &p.routing, t.tile(), opts_det).unwrap();
        let mut sim = SimBackend::new();
        let got = device_moe_layer(&mut sim, &p.inputs(), &t, opts, 2).unwrap();
        let sort =
            moegen_runtime::routing::moe_sort(&p.routing.experts, 24, &p.shape.window, t.tile())
                .unwrap();
        let g1 =
            gemm1_reference(&p.shape, &p.acts, &p.weights, &sort, Gemm1Options::default()).unwrap();
        let c = gemm2_contributions(&p.shape, &g1, &p.weights, &sort, &p.routing).unwrap();
        for (n, (a, b)) in got.output.iter().zip(&want.output).enumerate() {
            let (tok, col) = (n / 768, n % 768);
            let mass: f32 = (0..4).map(|s| c[(tok * 4 + s) * 768 + col].abs()).sum();
            let (a, b) = (a.to_f32(), b.to_f32());
            assert!((a - b).abs() <= mass * 4.0 * 2f32.powi(-8), "{t} element {n}: {a} vs {b}");
        }
    }
    assert_eq!(ran, 16, "every tactic applies, the GEMM2 N=256 cluster-2 ones included");
}

#[test]
fn multiples_of_64_run_with_k_and_n_tails() {
    // H 320: GEMM1 has one whole K stage and a partial one of 64, GEMM2's N blocks of 128
    // and 256 end 64 columns into the last; I 192: GEMM2's only K stage is partial (three
    // of four MMAs), GEMM1's 2I = 384 ends half-way into its second N block of 256.
    let d = Dims { h: 320, i: 192, experts: 8, offset: 2, local: 4, k: 2 };
    let p = problem_with(d, 40, 77, &random_routes);
    let mut ran = 0;
    for t in nvfp4_tactics() {
        if !t.applies_to(1, 192, 320) {
            continue;
        }
        ran += 1;
        check(&p, &t, FinalizeMode::BulkReduceAdd, 2);
        check(&p, &t, FinalizeMode::Deterministic, 3);
    }
    assert_eq!(ran, 16, "every tactic serves multiples of 64");
}

#[test]
fn a_cluster_needs_an_n_tile_per_rank() {
    // H 192 is one N tile of 256: the 2-wide N 256 GEMM2 clusters do not apply, and the
    // device path refuses them as the guard does; the other tactics run it exactly.
    let d = Dims { h: 192, i: 128, experts: 8, offset: 2, local: 4, k: 2 };
    let p = problem_with(d, 6, 78, &random_routes);
    let opts = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let (mut ran, mut refused) = (0, 0);
    for t in nvfp4_tactics() {
        if t.applies_to(1, 128, 192) {
            ran += 1;
            check(&p, &t, FinalizeMode::Deterministic, 2);
        } else {
            refused += 1;
            assert_eq!(t.gemm2().mma_tiler()[1], 256, "{t}");
            assert_eq!(t.gemm2().cluster()[1], 2, "{t}");
            let mut sim = SimBackend::new();
            assert!(device_moe_layer(&mut sim, &p.inputs(), &t, opts, 2).is_err(), "{t}");
        }
    }
    assert_eq!((ran, refused), (12, 4));
}

/// The kernel-by-kernel runner has only the plain-SwiGLU kernels: weights carrying another
/// epilogue (here a GEMM2 bias) are refused by name, never run as if plain.
#[test]
fn weights_with_another_epilogue_are_refused() {
    let mut p = problem(8, 3, &random_routes);
    let l = p.shape.local_experts();
    let bias = vec![0.5f32; l * p.shape.hidden];
    let epilogue =
        ExpertEpilogue::new(&p.shape, moegen_dsl::Activation::Swiglu, Vec::new(), None, Some(bias))
            .unwrap();
    p.weights = p.weights.clone().with_epilogue(&p.shape, epilogue).unwrap();
    let tactic = nvfp4_tactics()[0];
    let opts = ReferenceOptions::default();
    let e = device_moe_layer(&mut SimBackend::new(), &p.inputs(), &tactic, opts, 1).unwrap_err();
    assert!(e.to_string().contains("gemm2_bias: true"), "{e}");
}
