//! The runtime's layer API on the simulator backend, the path a GPU takes: weights uploaded
//! once, one workspace, forward on the caller's buffers with no allocation and no wait,
//! every bad input refused before a launch, graph replay equal to eager, dispatch and
//! autotuning with a cache that round-trips.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{ActivationFormat, Arch, FinalizeMode, TileSize};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::backend::{Backend, BackendError, DevicePtr};
use moegen_runtime::layer::*;
use moegen_runtime::reference::*;
use moegen_runtime::routing::{ExpertWindow, moe_sort};

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

const MAX_TOKENS: usize = 8;

struct Setup {
    sim: SimBackend,
    shape: MoeShape,
    prepared: PreparedWeights,
    input_scale: f32,
    x: Vec<bf16>,
    ids: Vec<i32>,
    weights: Vec<f32>,
}

fn setup(tokens: usize) -> Setup {
    let shape = MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let (h, i, l) = (512, 256, 4);
    let mut r = Rng(7);
    let x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(r.normal())).collect();
    let s = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..l * i * h).map(|_| r.normal() * s).collect();
    let gate: Vec<f32> = (0..l * i * h).map(|_| r.normal() * s).collect();
    let down: Vec<f32> = (0..l * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    // The static input scale a calibration would give for this batch.
    let input_scale = nvfp4_global_scale(block_amax(&xf)).unwrap();
    let prepared = prepare_weights(&shape, &up, &gate, &down, input_scale, 336.0).unwrap();
    let ids: Vec<i32> = (0..tokens * 2).map(|j| ((j * 5 + j / 2) % 8) as i32).collect();
    let weights: Vec<f32> = (0..tokens * 2).map(|j| 0.25 + (j % 2) as f32 * 0.5).collect();
    Setup { sim: SimBackend::new().with_sm_count(4), shape, prepared, input_scale, x, ids, weights }
}

fn upload<T: Copy>(b: &mut SimBackend, v: &[T], to_bytes: impl Fn(T) -> Vec<u8>) -> DeviceSlice {
    let bytes: Vec<u8> = v.iter().flat_map(|&x| to_bytes(x)).collect();
    DeviceSlice::new(b.upload_new(&bytes).unwrap(), bytes.len() as u64)
}

fn io(s: &mut Setup, tokens: usize) -> ForwardIo {
    let h = s.shape.hidden;
    ForwardIo {
        tokens,
        activations: upload(&mut s.sim, &s.x, |v| v.to_bits().to_le_bytes().to_vec()),
        expert_ids: upload(&mut s.sim, &s.ids, |v| v.to_le_bytes().to_vec()),
        expert_weights: upload(&mut s.sim, &s.weights, |v| v.to_le_bytes().to_vec()),
        output: DeviceSlice::new(s.sim.alloc(tokens * h * 2).unwrap(), (tokens * h * 2) as u64),
    }
}

fn workspace(s: &mut Setup, deterministic: bool) -> Workspace {
    let spec = WorkspaceSpec {
        max_tokens: MAX_TOKENS,
        top_k: 2,
        max_local_experts: 4,
        max_hidden: s.shape.hidden,
        max_intermediate: s.shape.intermediate,
        tile_sizes: TileSize::SM100.to_vec(),
        deterministic,
        arch: moegen_dsl::Arch::Sm100,
        activations: moegen_dsl::ActivationFormat::Nvfp4,
    };
    Workspace::new(&mut s.sim, &KernelSet::builtin(), spec).unwrap()
}

fn layer(s: &mut Setup, finalize: FinalizeMode) -> MoeLayer {
    layer_with(s, LayerConfig { finalize, ..LayerConfig::new(s.shape) })
}

fn layer_with(s: &mut Setup, config: LayerConfig) -> MoeLayer {
    let weights = LayerWeights::upload(&mut s.sim, &s.shape, &s.prepared, s.input_scale).unwrap();
    let kernels = KernelSet::builtin();
    let tactics = MoeLayer::candidates(
        &config,
        &kernels,
        MAX_TOKENS as u64,
        Arch::Sm100,
        WeightFormat::Nvfp4,
    )
    .unwrap();
    // Every tactic applies at H 512, I 256, and the built-in set holds each recipe's GEMM1s.
    assert_eq!(tactics.len(), 16, "tactics for {config:?}");
    let dev = DeviceModel::b200().with_sms(s.sim.sm_count());
    let table = DispatchTable::analytic(&s.shape, MAX_TOKENS as u64, &tactics, &dev).unwrap();
    MoeLayer::new(&s.sim, config, weights, &kernels, table).unwrap()
}

fn read_bf16(b: &mut SimBackend, d: DeviceSlice, n: usize) -> Vec<bf16> {
    let bytes = b.download(d.ptr, n * 2).unwrap();
    bytes.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect()
}

fn reference(s: &Setup, tokens: usize, tile: TileSize, finalize: FinalizeMode) -> Vec<bf16> {
    let xf: Vec<f32> = s.x[..tokens * 512].iter().map(|v| v.to_f32()).collect();
    let acts = quantize_activations(&xf, tokens, 512, s.input_scale).unwrap();
    let routing = Routing {
        tokens,
        experts: s.ids[..tokens * 2].to_vec(),
        weights: s.weights[..tokens * 2].to_vec(),
    };
    let opts = ReferenceOptions { finalize, ..Default::default() };
    moe_reference(&s.shape, &acts, &s.prepared, &routing, tile, opts).unwrap().output
}

#[test]
fn forward_matches_the_reference_and_allocates_and_waits_for_nothing() {
    for finalize in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
        let tokens = 5;
        let mut s = setup(tokens);
        let ws = workspace(&mut s, finalize == FinalizeMode::Deterministic);
        let layer = layer(&mut s, finalize);
        let io = io(&mut s, tokens);
        let before = s.sim.stats();
        let tactic = layer.forward(&mut s.sim, &ws, &io).unwrap();
        let after = s.sim.stats();
        assert_eq!(after.allocations, before.allocations, "no allocation on the run path");
        assert_eq!(after.synchronizations, before.synchronizations, "no wait on the run path");
        assert_eq!(after.uploads, before.uploads, "no host copy on the run path");
        // Sort (one launch: 10 routes fit one block), quantization, GEMM1, GEMM2, and the
        // deterministic finalize.
        let launches = 4 + u64::from(finalize == FinalizeMode::Deterministic);
        assert_eq!(after.launches - before.launches, launches);
        layer.check_errors(&mut s.sim, &ws).unwrap();
        let got = read_bf16(&mut s.sim, io.output, tokens * 512);
        assert_eq!(got, reference(&s, tokens, tactic.tile(), finalize), "{finalize:?} {tactic}");
    }
}

#[test]
fn every_bad_input_is_refused_before_any_launch() {
    let mut s = setup(MAX_TOKENS);
    let ws = workspace(&mut s, false);
    let layer = layer(&mut s, FinalizeMode::BulkReduceAdd);
    let good = io(&mut s, 4);
    let launches = s.sim.stats().launches;
    let mut bad = |f: &dyn Fn(&mut ForwardIo), want: &dyn Fn(&LayerError) -> bool| {
        let mut io = good;
        f(&mut io);
        let e = layer.forward(&mut s.sim, &ws, &io).unwrap_err();
        assert!(want(&e), "{e}");
    };
    bad(&|io| io.tokens = 0, &|e| matches!(e, LayerError::Plan(_)));
    bad(&|io| io.tokens = MAX_TOKENS + 1, &|e| {
        matches!(e, LayerError::TooManyTokens { tokens: 9, max: 8 })
    });
    bad(&|io| io.activations.bytes = 4 * 512 * 2 - 2, &|e| {
        matches!(e, LayerError::BufferTooSmall { buffer: "activations", .. })
    });
    bad(&|io| io.expert_ids.bytes = 7 * 4, &|e| {
        matches!(e, LayerError::BufferTooSmall { buffer: "expert ids", needed: 32, given: 28 })
    });
    bad(&|io| io.expert_weights.bytes = 0, &|e| {
        matches!(e, LayerError::BufferTooSmall { buffer: "expert weights", .. })
    });
    bad(&|io| io.output.ptr.0 += 2, &|e| {
        matches!(e, LayerError::Misaligned { buffer: "output", .. })
    });
    // The bulk reduce zeroes the output before the sort reads anything: an output that
    // overlaps the activations (in place, or one row off) is refused by name.
    bad(&|io| io.output = io.activations, &|e| {
        matches!(e, LayerError::Aliased { first: "output", second: "activations" })
    });
    bad(
        &|io| {
            io.output = DeviceSlice::new(DevicePtr(io.activations.ptr.0 + 512 * 2), io.output.bytes)
        },
        &|e| matches!(e, LayerError::Aliased { .. }),
    );
    bad(&|io| io.output.ptr = io.expert_weights.ptr, &|e| {
        matches!(e, LayerError::Aliased { first: "output", second: "expert weights" })
    });
    assert_eq!(s.sim.stats().launches, launches, "nothing was launched");
    // A workspace planned for another top_k, or too few tiles sizes, is refused.
    let spec = WorkspaceSpec {
        max_tokens: 8,
        top_k: 4,
        max_local_experts: 4,
        max_hidden: 512,
        max_intermediate: 256,
        tile_sizes: vec![TileSize::T128],
        deterministic: false,
        arch: moegen_dsl::Arch::Sm100,
        activations: moegen_dsl::ActivationFormat::Nvfp4,
    };
    let other = Workspace::new(&mut s.sim, &KernelSet::builtin(), spec).unwrap();
    let e = layer.forward(&mut s.sim, &other, &good).unwrap_err();
    assert!(matches!(e, LayerError::WorkspaceMismatch { .. }), "{e}");
    // Engine-owned workspace memory is checked for size and alignment.
    let plan = Workspace::plan_for(ws.spec()).unwrap();
    let small = DeviceSlice::new(ws.memory().ptr, plan.workspace_bytes - 1);
    assert!(matches!(
        Workspace::from_device(&KernelSet::builtin(), ws.spec().clone(), small),
        Err(LayerError::BufferTooSmall { buffer: "workspace", .. })
    ));
    // Weights in the engine's memory must be complete.
    let e = LayerWeights::from_device(
        &s.shape,
        Arch::Sm100,
        WeightFormat::Nvfp4,
        ActivationFormat::Nvfp4,
        &[],
    )
    .unwrap_err();
    assert!(matches!(e, LayerError::BufferTooSmall { buffer: "w1", .. }), "{e}");
    // Bad weights and scales are refused at upload.
    let mut nan = s.prepared.clone();
    nan.w1_scales[3] = 0x7F;
    assert!(LayerWeights::upload(&mut s.sim, &s.shape, &nan, 1.0).is_err());
    assert!(LayerWeights::upload(&mut s.sim, &s.shape, &s.prepared, f32::NAN).is_err());
}

/// Checks only the device can run (the ids and weights are in device memory) come back
/// from the error record as the typed errors the host checks raise, naming the first
/// offending route; the next good forward clears them.
#[test]
fn device_checked_inputs_are_decoded_into_the_host_errors() {
    let tokens = 4;
    let mut s = setup(tokens);
    let ws = workspace(&mut s, false);
    let layer = layer(&mut s, FinalizeMode::BulkReduceAdd);
    let run = |s: &mut Setup, ids: &[i32], weights: &[f32]| {
        let (good_ids, good_w) = (s.ids.clone(), s.weights.clone());
        s.ids = ids.to_vec();
        s.weights = weights.to_vec();
        let io = io(s, tokens);
        (s.ids, s.weights) = (good_ids, good_w);
        layer.forward(&mut s.sim, &ws, &io).unwrap();
        let host = moe_sort(ids, tokens, &s.shape.window, TileSize::T128).err();
        (layer.check_errors(&mut s.sim, &ws), host)
    };
    let (ids, w) = (s.ids.clone(), s.weights.clone());
    let mut bad_ids = ids.clone();
    bad_ids[5] = 8;
    bad_ids[6] = -3;
    let want =
        moegen_runtime::RuntimeError::ExpertOutOfRange { token: 2, slot: 1, expert: 8, experts: 8 };
    let (device, host) = run(&mut s, &bad_ids, &w);
    assert_eq!(device, Err(LayerError::Input(want.clone())));
    assert_eq!(host, Some(want.clone()), "the host check names the same route");
    let mut bad_w = w.clone();
    bad_w[3] = f32::INFINITY;
    bad_w[6] = f32::NAN;
    let nan = moegen_runtime::RuntimeError::NonFiniteRouterWeight { token: 1, slot: 1 };
    assert_eq!(run(&mut s, &ids, &bad_w).0, Err(LayerError::Input(nan)));
    // Both at once: the expert id is reported, as the host reference does.
    assert_eq!(run(&mut s, &bad_ids, &bad_w).0, Err(LayerError::Input(want.clone())));
    // A token naming one expert twice: the first such route, its earliest same slot, the id.
    let k = s.shape.top_k();
    let mut dup_ids = ids.clone();
    dup_ids[2 * k + 1] = dup_ids[2 * k];
    dup_ids[3 * k + 1] = dup_ids[3 * k];
    let dup = moegen_runtime::RuntimeError::DuplicateExpert {
        token: 2,
        slot: 1,
        earlier_slot: 0,
        expert: i64::from(dup_ids[2 * k]),
    };
    let (device, host) = run(&mut s, &dup_ids, &w);
    assert_eq!(device, Err(LayerError::Input(dup.clone())));
    assert_eq!(host, Some(dup.clone()), "the host check names the same route");
    // The order of the checks: range, then duplicates, then weights.
    assert_eq!(run(&mut s, &dup_ids, &bad_w).0, Err(LayerError::Input(dup)));
    let mut both = dup_ids.clone();
    both[tokens * k - 1] = 8;
    assert!(matches!(
        run(&mut s, &both, &w).0,
        Err(LayerError::Input(moegen_runtime::RuntimeError::ExpertOutOfRange { expert: 8, .. }))
    ));
    assert_eq!(run(&mut s, &ids, &w).0, Ok(()), "a good forward clears the record");
}

#[test]
fn a_captured_graph_replays_the_eager_bytes() {
    let tokens = 3;
    let mut s = setup(tokens);
    let ws = workspace(&mut s, true);
    let layer = layer(&mut s, FinalizeMode::Deterministic);
    let io = io(&mut s, tokens);
    layer.forward(&mut s.sim, &ws, &io).unwrap();
    let eager = read_bf16(&mut s.sim, io.output, tokens * 512);
    s.sim.memset(io.output.ptr, 0xAB, tokens * 512 * 2).unwrap();
    let before = s.sim.stats();
    let g = layer.capture(&mut s.sim, &ws, &io).unwrap();
    assert_eq!(s.sim.stats().launches, before.launches, "capture records, runs nothing");
    s.sim.replay(g).unwrap();
    s.sim.replay(g).unwrap();
    assert_eq!(read_bf16(&mut s.sim, io.output, tokens * 512), eager);
    assert_eq!(s.sim.stats().allocations, before.allocations);
    let per_replay = 5; // sort (one launch), activation quantization, GEMM1, GEMM2, finalize
    assert_eq!(s.sim.stats().launches - before.launches, 2 * per_replay, "replayed launches count");
    // A dropped graph is gone; another capture gets a new id.
    s.sim.drop_graph(g).unwrap();
    let usage = |r: Result<(), BackendError>| matches!(r, Err(BackendError::Usage(_)));
    assert!(usage(s.sim.replay(g)) && usage(s.sim.drop_graph(g)));
    let g2 = layer.capture(&mut s.sim, &ws, &io).unwrap();
    assert_ne!(g2, g);
    s.sim.memset(io.output.ptr, 0xAB, tokens * 512 * 2).unwrap();
    s.sim.replay(g2).unwrap();
    assert_eq!(read_bf16(&mut s.sim, io.output, tokens * 512), eager);
    // Capture refuses what a graph cannot hold.
    s.sim.begin_capture().unwrap();
    assert!(s.sim.alloc(16).is_err());
    assert!(s.sim.download(io.output.ptr, 2).is_err());
    s.sim.end_capture().unwrap_err();
}

#[test]
fn the_analytic_table_covers_every_bucket_and_prefers_small_tiles_for_small_batches() {
    let s = setup(1);
    let config = LayerConfig::new(s.shape);
    let kernels = KernelSet::builtin();
    let tactics =
        MoeLayer::candidates(&config, &kernels, 16384, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    let dev = DeviceModel::b200();
    let t = DispatchTable::analytic(&s.shape, 16384, &tactics, &dev).unwrap();
    assert_eq!(t.choices().len(), t.buckets().buckets().len());
    assert_eq!(t.choose(1).unwrap().1.tile(), TileSize::T128);
    for n in [1, 3, 100, 3000, 16384, 40000] {
        let (bucket, _) = t.choose(n).unwrap();
        assert!(bucket >= n, "{n} → {bucket}");
    }
}

#[test]
fn tuning_times_every_tactic_on_one_workspace_and_the_cache_round_trips() {
    let mut s = setup(MAX_TOKENS);
    let ws = workspace(&mut s, false);
    let mut layer = layer(&mut s, FinalizeMode::BulkReduceAdd);
    let kernels = KernelSet::builtin();
    let tactics: Vec<_> = layer.tactics().into_iter().step_by(9).collect();
    assert_eq!(tactics.len(), 2);
    assert_ne!(tactics[0].tile(), tactics[1].tile());
    let cache = std::env::temp_dir().join(format!("moegen-tune-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&cache);
    let opts = TuneOptions {
        warmup: 0,
        iterations: 1,
        tactics: Some(tactics.clone()),
        cache: Some(cache.clone()),
        progress: false,
    };
    // Launches of one forward pass per tactic, to count the tuner's passes below.
    let one = io(&mut s, 1);
    let per_pass: Vec<u64> = tactics
        .iter()
        .map(|t| {
            let n = s.sim.stats().launches;
            layer.forward_with(&mut s.sim, &ws, &one, t).unwrap();
            s.sim.stats().launches - n
        })
        .collect();
    let before = s.sim.stats();
    let first = autotune(&mut s.sim, &mut layer, kernels.checksum(), &ws, &opts).unwrap();
    assert!(!first.from_cache);
    let after = s.sim.stats();
    // Every bucket is timed on its routing draws (warm-up 0, one iteration): a pass per
    // draw and tactic.
    let w = &s.shape.window;
    let draws: u64 = [1usize, 2, 4, 8]
        .iter()
        .map(|&b| routing_draws((b * w.top_k() * w.local()).div_ceil(w.num_experts())) as u64)
        .sum();
    assert_eq!(draws, 4 * MAX_ROUTING_DRAWS as u64, "a few local routes: every bucket capped");
    assert_eq!(
        after.launches - before.launches,
        draws * per_pass.iter().sum::<u64>(),
        "one pass per routing draw, tactic and bucket"
    );
    // Each pass is a captured graph's replay (what engines run at decode), not eager
    // launches.
    assert_eq!(after.replays - before.replays, draws * tactics.len() as u64, "graph replays");
    assert!(after.allocations > before.allocations, "the tuner uploads its inputs");
    assert_eq!(
        after.allocations - before.allocations,
        after.frees - before.frees,
        "and frees every one of them"
    );
    let buckets = first.table.buckets().buckets().to_vec();
    assert_eq!(buckets, vec![1, 2, 4, 8]);
    assert_eq!(first.trials.len(), buckets.len() * tactics.len());
    assert!(first.trials.iter().all(|t| t.workspace == ws.memory().ptr), "one shared workspace");
    for (bucket, choice) in buckets.iter().zip(first.table.choices()) {
        let best = first
            .trials
            .iter()
            .filter(|t| t.bucket == *bucket)
            .min_by(|a, b| a.ms.total_cmp(&b.ms))
            .unwrap();
        assert_eq!(best.tactic, *choice, "bucket {bucket} picks its fastest trial");
    }
    assert_eq!(layer.dispatch(), &first.table);
    // The same key reads the table back without running anything.
    let launches = s.sim.stats().launches;
    let second = autotune(&mut s.sim, &mut layer, kernels.checksum(), &ws, &opts).unwrap();
    assert!(second.from_cache);
    assert_eq!(second.table, first.table);
    assert_eq!(s.sim.stats().launches, launches);
    // Another kernel set misses the cache.
    let opts_other = TuneOptions { tactics: Some(vec![tactics[0]]), ..opts.clone() };
    let third = autotune(&mut s.sim, &mut layer, kernels.checksum() ^ 1, &ws, &opts_other).unwrap();
    assert!(!third.from_cache);
    let _ = std::fs::remove_file(&cache);
}

/// `LayerConfig::recipe` picks GEMM1's epilogue: the Exact kernels give the Exact
/// reference's bytes; the default runs the Fast kernels and gives the Fast reference's.
#[test]
fn the_configured_recipe_is_the_one_that_runs() {
    let tokens = 4;
    let mut s = setup(tokens);
    // Record every launch's kernel name: the output alone rarely tells the recipes apart
    // (a last-bit difference in h seldom moves an FP4 code).
    s.sim = std::mem::take(&mut s.sim).with_profile();
    let ws = workspace(&mut s, true);
    let config = LayerConfig {
        finalize: FinalizeMode::Deterministic,
        recipe: Some(moegen_dsl::EpilogueRecipe::Exact),
        ..LayerConfig::new(s.shape)
    };
    let exact_layer = layer_with(&mut s, config);
    let io = io(&mut s, tokens);
    let tactic = exact_layer.forward(&mut s.sim, &ws, &io).unwrap();
    let got = read_bf16(&mut s.sim, io.output, tokens * 512);
    let xf: Vec<f32> = s.x[..tokens * 512].iter().map(|v| v.to_f32()).collect();
    let acts = quantize_activations(&xf, tokens, 512, s.input_scale).unwrap();
    let routing = Routing {
        tokens,
        experts: s.ids[..tokens * 2].to_vec(),
        weights: s.weights[..tokens * 2].to_vec(),
    };
    let exact = ReferenceOptions {
        finalize: FinalizeMode::Deterministic,
        recipe: moegen_dsl::EpilogueRecipe::Exact,
        ..Default::default()
    };
    let want = moe_reference(&s.shape, &acts, &s.prepared, &routing, tactic.tile(), exact);
    let want = want.unwrap().output;
    assert_eq!(got, want);
    // The default layer runs the Fast kernels and gives the Fast reference's bytes.
    let fast_layer = layer(&mut s, FinalizeMode::Deterministic);
    let t = fast_layer.forward(&mut s.sim, &ws, &io).unwrap();
    let fast_got = read_bf16(&mut s.sim, io.output, tokens * 512);
    let fast = ReferenceOptions { recipe: moegen_dsl::EpilogueRecipe::Fast, ..exact };
    let fast_want = moe_reference(&s.shape, &acts, &s.prepared, &routing, t.tile(), fast);
    let fast_want = fast_want.unwrap().output;
    assert_eq!(fast_got, fast_want);
    let gemm1s: Vec<&str> =
        s.sim.profiles.iter().map(|(k, _)| *k).filter(|k| k.contains("gemm1")).collect();
    assert_eq!(gemm1s.len(), 2, "{gemm1s:?}");
    assert!(gemm1s[0].ends_with("_exact"), "the Exact layer ran {}", gemm1s[0]);
    assert!(!gemm1s[1].ends_with("_exact"), "the default layer ran {}", gemm1s[1]);
}

/// The memory a layer and a workspace allocated goes back to the backend on release (the
/// buffers are gone); an engine's buffers are left alone.
#[test]
fn release_frees_what_moegen_allocated_and_only_that() {
    let mut s = setup(MAX_TOKENS);
    let before = s.sim.stats();
    let ws = workspace(&mut s, true);
    let layer = layer(&mut s, FinalizeMode::Deterministic);
    let made = s.sim.stats().allocations - before.allocations;
    assert_eq!(made, 1 + 8, "one workspace, eight weight buffers");
    let base = ws.memory().ptr;
    layer.release(&mut s.sim).unwrap();
    ws.release(&mut s.sim).unwrap();
    assert_eq!(s.sim.stats().frees - before.frees, made, "everything allocated is freed");
    assert!(s.sim.download(base, 1).is_err(), "a released workspace is gone");
    assert!(s.sim.free(base).is_err(), "a second free is refused");

    // Engine memory: from_device handles release nothing.
    let spec = workspace(&mut s, false).spec().clone();
    let bytes = Workspace::plan_for(&spec).unwrap().workspace_bytes;
    let engine = DeviceSlice::new(s.sim.alloc(bytes as usize).unwrap(), bytes);
    let frees = s.sim.stats().frees;
    Workspace::from_device(&KernelSet::builtin(), spec, engine)
        .unwrap()
        .release(&mut s.sim)
        .unwrap();
    let shape = s.shape;
    let uploaded = LayerWeights::upload(&mut s.sim, &shape, &s.prepared, s.input_scale).unwrap();
    let sizes = LayerWeights::sizes(&shape, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    let buffers: Vec<_> = sizes
        .iter()
        .map(|&(b, n)| (b, DeviceSlice::new(s.sim.alloc(n as usize).unwrap(), n)))
        .collect();
    let engine_weights = LayerWeights::from_device(
        &shape,
        Arch::Sm100,
        WeightFormat::Nvfp4,
        moegen_dsl::ActivationFormat::Nvfp4,
        &buffers,
    )
    .unwrap();
    engine_weights.release(&mut s.sim).unwrap();
    assert_eq!(s.sim.stats().frees, frees, "the engine's buffers stay");
    assert!(s.sim.download(engine.ptr, 16).is_ok() && s.sim.download(buffers[0].1.ptr, 16).is_ok());
    uploaded.release(&mut s.sim).unwrap();
    assert_eq!(s.sim.stats().frees, frees + 8);
}
