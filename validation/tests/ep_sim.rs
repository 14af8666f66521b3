//! Expert parallelism on the CPU: the `ExpertParallel` layer in both modes (all-gather (a),
//! all-to-all (b)) over G ∈ {2, 4} simulator backends joined by the host collective, against
//! the single layer holding every expert on one simulator backend. Deterministic finalize:
//! bit for bit. Bulk finalize: within the bulk-order slack (docs/reference.md). Edge cases
//! (a rank owning no route, every route on one rank, a global batch not divisible by G, a
//! dropped route) and every refusal.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{ActivationFormat, Arch, FinalizeMode, Target, TileSize};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::backend::{Backend, BackendError, UsageError};
use moegen_runtime::ep::*;
use moegen_runtime::layer::*;
use moegen_runtime::reference::*;
use moegen_runtime::routing::moe_sort;
use moegen_validation::layer_check::finalize_slack;

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

const H: usize = 256;
const I: usize = 256;
const E: usize = 16;
const K: usize = 4;

/// Unquantized experts `[E, I, H]` / `[E, H, I]` and a batch.
struct Model {
    up: Vec<f32>,
    gate: Vec<f32>,
    down: Vec<f32>,
    input_scale: f32,
}

struct Batch {
    x: Vec<bf16>,
    ids: Vec<i32>,
    weights: Vec<f32>,
}

fn model(seed: u64) -> Model {
    let mut r = Rng(seed);
    let s = 1.0 / (H as f32).sqrt();
    let up = (0..E * I * H).map(|_| r.normal() * s).collect();
    let gate = (0..E * I * H).map(|_| r.normal() * s).collect();
    let down = (0..E * H * I).map(|_| r.normal() / (I as f32).sqrt()).collect();
    Model { up, gate, down, input_scale: 0.0 }
}

/// `tokens` tokens, each routed to K distinct experts among `experts`.
fn batch(m: &mut Model, tokens: usize, seed: u64, experts: &[i32]) -> Batch {
    let mut r = Rng(seed);
    let x: Vec<bf16> = (0..tokens * H).map(|_| bf16::from_f32(r.normal())).collect();
    let mut ids = Vec::with_capacity(tokens * K);
    for _ in 0..tokens {
        let mut pool = experts.to_vec();
        for _ in 0..K {
            let j = (r.next() % pool.len() as u64) as usize;
            ids.push(pool.swap_remove(j));
        }
    }
    let weights = (0..tokens * K).map(|_| 0.05 + (r.next() % 1000) as f32 / 1000.0).collect();
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    m.input_scale = nvfp4_global_scale(block_amax(&xf)).unwrap();
    Batch { x, ids, weights }
}

fn prepared(m: &Model, shape: &MoeShape) -> PreparedWeights {
    let (first, l) = (shape.window.offset(), shape.local_experts());
    let part = |v: &[f32]| v[first * I * H..(first + l) * I * H].to_vec();
    prepare_weights(shape, &part(&m.up), &part(&m.gate), &part(&m.down), m.input_scale, 336.0)
        .unwrap()
}

fn sim() -> SimBackend {
    SimBackend::new().with_sm_count(4)
}

fn config(shape: MoeShape, finalize: FinalizeMode) -> LayerConfig {
    LayerConfig { finalize, ..LayerConfig::new(shape) }
}

fn build_layer(b: &mut SimBackend, m: &Model, c: LayerConfig, max_tokens: usize) -> MoeLayer {
    let weights = LayerWeights::upload(b, &c.shape, &prepared(m, &c.shape), m.input_scale).unwrap();
    let kernels = KernelSet::builtin();
    let max = max_tokens as u64;
    let tactics =
        MoeLayer::candidates(&c, &kernels, max, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    let dev = DeviceModel::b200().with_sms(b.sm_count());
    let table = DispatchTable::analytic(&c.shape, max, &tactics, &dev).unwrap();
    MoeLayer::new(b, c, weights, &kernels, table).unwrap()
}

fn io(b: &mut SimBackend, batch: &Batch, rows: std::ops::Range<usize>) -> ForwardIo {
    ForwardIo {
        tokens: rows.len(),
        activations: b.upload_slice(&batch.x[rows.start * H..rows.end * H]).unwrap(),
        expert_ids: b.upload_slice(&batch.ids[rows.start * K..rows.end * K]).unwrap(),
        expert_weights: b.upload_slice(&batch.weights[rows.start * K..rows.end * K]).unwrap(),
        output: b.alloc_slice::<bf16>(rows.len() * H).unwrap(),
    }
}

/// The single layer: every expert on one device.
fn single(m: &Model, batch: &Batch, tokens: usize, finalize: FinalizeMode) -> Vec<bf16> {
    let mut b = sim();
    let (layer, ws) = single_layer(&mut b, m, tokens, finalize);
    let io = io(&mut b, batch, 0..tokens);
    layer.forward(&mut b, &ws, &io).unwrap();
    layer.check_errors(&mut b, &ws).unwrap();
    b.download_slice::<bf16>(io.output).unwrap()
}

/// The layer holding every expert, with its workspace, for up to `tokens` tokens.
fn single_layer(
    b: &mut SimBackend,
    m: &Model,
    tokens: usize,
    finalize: FinalizeMode,
) -> (MoeLayer, Workspace) {
    let shape = MoeShape::new(H, I, ExpertWindow::new(E, 0, E, K).unwrap()).unwrap();
    let layer = build_layer(b, m, config(shape, finalize), tokens);
    let spec = WorkspaceSpec {
        max_tokens: tokens,
        top_k: K,
        max_local_experts: E,
        max_hidden: H,
        max_intermediate: I,
        tile_sizes: TileSize::SM100.to_vec(),
        deterministic: finalize == FinalizeMode::Deterministic,
        arch: Arch::Sm100,
        activations: ActivationFormat::Nvfp4,
    };
    (layer, Workspace::new(b, &KernelSet::builtin(), spec).unwrap())
}

/// G ranks, each with its window's layer, workspace and its `n` tokens.
struct Ranks {
    ep: ExpertParallel,
    backends: Vec<SimBackend>,
    workspaces: Vec<EpWorkspace>,
    ios: Vec<ForwardIo>,
    coll: HostCollective,
}

fn ranks(m: &Model, batch: &Batch, g: usize, n: usize, finalize: FinalizeMode) -> Ranks {
    ranks_in(EpMode::AllGather, m, batch, g, n, finalize)
}

fn ranks_in(
    mode: EpMode,
    m: &Model,
    batch: &Batch,
    g: usize,
    n: usize,
    finalize: FinalizeMode,
) -> Ranks {
    let p = EpPartition::new(E, g, K).unwrap();
    let det = finalize == FinalizeMode::Deterministic;
    let plan: EpPlan = match mode {
        EpMode::AllGather => AllGatherPlan::new(p, n, H, det).unwrap().into(),
        EpMode::AllToAll => AllToAllPlan::new(p, n, H).unwrap().into(),
    };
    let mut backends: Vec<SimBackend> = (0..g).map(|_| sim()).collect();
    let (mut layers, mut workspaces, mut ios) = (Vec::new(), Vec::new(), Vec::new());
    for (r, b) in backends.iter_mut().enumerate() {
        let shape = MoeShape::new(H, I, mode.layer_window(&p, r).unwrap()).unwrap();
        layers.push(build_layer(b, m, config(shape, finalize), plan.layer_tokens()));
        let tiles = TileSize::SM100.to_vec();
        let spec = match &plan {
            EpPlan::AllGather(a) => {
                a.workspace_spec(I, tiles, Arch::Sm100, ActivationFormat::Nvfp4)
            }
            EpPlan::AllToAll(a) => {
                a.workspace_spec(I, tiles, det, Arch::Sm100, ActivationFormat::Nvfp4)
            }
        };
        workspaces.push(EpWorkspace::new(b, &KernelSet::builtin(), plan.clone(), r, spec).unwrap());
        ios.push(io(b, batch, r * n..(r + 1) * n));
    }
    let ranks: Vec<usize> = (0..g).collect();
    let ep = ExpertParallel::with_mode(p, mode, &ranks, layers).unwrap();
    Ranks { ep, backends, workspaces, ios, coll: HostCollective::new(g) }
}

impl Ranks {
    fn forward(&mut self) -> Result<Vec<moegen_dsl::MoeTactic>, EpError> {
        let mut bs: Vec<&mut dyn Backend> =
            self.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
        let ws: Vec<&EpWorkspace> = self.workspaces.iter().collect();
        self.ep.forward(&mut self.coll, &mut bs, &ws, &self.ios)
    }

    fn check_errors(&mut self) -> Result<(), EpError> {
        let mut bs: Vec<&mut dyn Backend> =
            self.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
        let ws: Vec<&EpWorkspace> = self.workspaces.iter().collect();
        self.ep.check_errors(&mut bs, &ws)
    }

    /// Uploads `ids` and `weights` (every rank's, `[G·N, K]`) into the ranks' buffers.
    fn set_routing(&mut self, ids: &[i32], weights: &[f32]) {
        let n = self.ios[0].tokens;
        for (r, (b, io)) in self.backends.iter_mut().zip(&self.ios).enumerate() {
            let rows = r * n * K..(r + 1) * n * K;
            let bytes: Vec<u8> = ids[rows.clone()].iter().flat_map(|v| v.to_le_bytes()).collect();
            b.upload(io.expert_ids.ptr, &bytes).unwrap();
            let bytes: Vec<u8> = weights[rows].iter().flat_map(|v| v.to_le_bytes()).collect();
            b.upload(io.expert_weights.ptr, &bytes).unwrap();
        }
    }

    fn output(&mut self) -> Vec<bf16> {
        self.check_errors().unwrap();
        let mut out = Vec::new();
        for (b, io) in self.backends.iter_mut().zip(&self.ios) {
            out.extend(b.download_slice::<bf16>(io.output).unwrap());
        }
        out
    }
}

fn run_ep(m: &Model, batch: &Batch, g: usize, n: usize, finalize: FinalizeMode) -> Vec<bf16> {
    run_ep_in(EpMode::AllGather, m, batch, g, n, finalize)
}

fn run_ep_in(
    mode: EpMode,
    m: &Model,
    batch: &Batch,
    g: usize,
    n: usize,
    finalize: FinalizeMode,
) -> Vec<bf16> {
    let mut r = ranks_in(mode, m, batch, g, n, finalize);
    r.forward().unwrap();
    r.output()
}

/// The bulk slack of the single layer's own contributions (docs/reference.md).
fn bulk_slack(m: &Model, batch: &Batch, tokens: usize) -> Vec<f64> {
    let shape = MoeShape::new(H, I, ExpertWindow::new(E, 0, E, K).unwrap()).unwrap();
    let w = prepared(m, &shape);
    let xf: Vec<f32> = batch.x[..tokens * H].iter().map(|v| v.to_f32()).collect();
    let acts = quantize_activations(&xf, tokens, H, m.input_scale).unwrap();
    let routing = Routing {
        tokens,
        experts: batch.ids[..tokens * K].to_vec(),
        weights: batch.weights[..tokens * K].to_vec(),
    };
    let sort = moe_sort(&routing.experts, tokens, &shape.window, TileSize::T128).unwrap();
    let c = LayerConfig::new(shape);
    let g1 = Gemm1Options { swiglu_input: c.swiglu_input, recipe: c.recipe_on(Target::Sm100f) };
    let h1 = gemm1_reference(&shape, &acts, &w, &sort, g1).unwrap();
    let c = gemm2_contributions(&shape, &h1, &w, &sort, &routing).unwrap();
    finalize_slack(&c, tokens, K, H, FinalizeMode::BulkReduceAdd)
}

fn all_experts() -> Vec<i32> {
    (0..E as i32).collect()
}

#[test]
fn deterministic_all_gather_equals_the_single_layer_bit_for_bit() {
    for (g, n, seed) in [(2, 3, 11), (4, 2, 12)] {
        let mut m = model(seed);
        let first = batch(&mut m, g * n, seed + 100, &all_experts());
        let want = single(&m, &first, g * n, FinalizeMode::Deterministic);
        let mut r = ranks(&m, &first, g, n, FinalizeMode::Deterministic);
        r.forward().unwrap();
        assert_eq!(r.output(), want, "G = {g}, {n} tokens per rank");
        // A second step in the same buffers with other routes: nothing of the first step's
        // routes may leak into it (each rank's route rows are zeroed before its GEMM2).
        let scale = m.input_scale;
        let next = batch(&mut m, g * n, seed + 200, &all_experts());
        m.input_scale = scale;
        for (rank, (b, io)) in r.backends.iter_mut().zip(&r.ios).enumerate() {
            let ids: Vec<u8> = next.ids[rank * n * K..(rank + 1) * n * K]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            b.upload(io.expert_ids.ptr, &ids).unwrap();
        }
        let next = Batch { x: first.x.clone(), ids: next.ids, weights: first.weights.clone() };
        r.forward().unwrap();
        let want = single(&m, &next, g * n, FinalizeMode::Deterministic);
        assert_eq!(r.output(), want, "G = {g}, second step");
    }
}

#[test]
fn deterministic_edge_cases_stay_bit_identical() {
    let mut m = model(21);
    // Rank 3 of 4 holds experts 12..16, which no token names: it computes nothing.
    let batch = batch(&mut m, 8, 22, &(0..12).collect::<Vec<_>>());
    let want = single(&m, &batch, 8, FinalizeMode::Deterministic);
    assert_eq!(run_ep(&m, &batch, 4, 2, FinalizeMode::Deterministic), want, "idle rank");
    // Every route on rank 0 of 2.
    let batch = batch_on(&mut m, 4, 23, 0..8);
    let want = single(&m, &batch, 4, FinalizeMode::Deterministic);
    assert_eq!(run_ep(&m, &batch, 2, 2, FinalizeMode::Deterministic), want, "one busy rank");
}

fn batch_on(m: &mut Model, tokens: usize, seed: u64, experts: std::ops::Range<i32>) -> Batch {
    batch(m, tokens, seed, &experts.collect::<Vec<_>>())
}

#[test]
fn a_global_batch_not_divisible_by_g_is_padded_and_the_real_rows_are_exact() {
    // 6 tokens over 4 ranks: 2, 2, 1, 1, padded to 2 each with a zero-weight token, as an
    // engine pads (every collective moves the same rows from every rank).
    let mut m = model(31);
    let pad = batch(&mut m, 2, 33, &all_experts());
    // The calibration scale stays the real batch's (`batch` sets it).
    let real = batch(&mut m, 6, 32, &all_experts());
    let want = single(&m, &real, 6, FinalizeMode::Deterministic);
    let homes = [0..2, 2..4, 4..5, 5..6];
    let mut padded = Batch { x: Vec::new(), ids: Vec::new(), weights: Vec::new() };
    let mut rows = Vec::new();
    for (r, home) in homes.iter().enumerate() {
        for t in home.clone() {
            padded.x.extend_from_slice(&real.x[t * H..(t + 1) * H]);
            padded.ids.extend_from_slice(&real.ids[t * K..(t + 1) * K]);
            padded.weights.extend_from_slice(&real.weights[t * K..(t + 1) * K]);
            rows.push(r * 2 + (t - home.start));
        }
        if home.len() < 2 {
            padded.x.extend_from_slice(&pad.x[..H]);
            padded.ids.extend_from_slice(&pad.ids[..K]);
            padded.weights.extend(std::iter::repeat_n(0.0, K));
        }
    }
    let got = run_ep(&m, &padded, 4, 2, FinalizeMode::Deterministic);
    for (t, &row) in rows.iter().enumerate() {
        assert_eq!(&got[row * H..(row + 1) * H], &want[t * H..(t + 1) * H], "token {t}");
    }
}

#[test]
fn bulk_all_gather_is_within_the_bulk_order_slack() {
    for (g, n, seed) in [(2, 3, 41), (4, 2, 42)] {
        let mut m = model(seed);
        let batch = batch(&mut m, g * n, seed + 100, &all_experts());
        let want = single(&m, &batch, g * n, FinalizeMode::BulkReduceAdd);
        let got = run_ep(&m, &batch, g, n, FinalizeMode::BulkReduceAdd);
        let slack = bulk_slack(&m, &batch, g * n);
        for (j, ((a, b), s)) in got.iter().zip(&want).zip(&slack).enumerate() {
            let d = (f64::from(a.to_f32()) - f64::from(b.to_f32())).abs();
            assert!(d <= *s, "G = {g}, element {j}: {a} vs {b}, slack {s}");
        }
    }
}

#[test]
fn bad_steps_are_refused_before_any_launch() {
    let mut m = model(51);
    let batch = batch(&mut m, 4, 52, &all_experts());
    let mut r = ranks(&m, &batch, 2, 2, FinalizeMode::Deterministic);
    let launches: Vec<u64> = r.backends.iter().map(|b| b.stats().launches).collect();
    let good = r.ios.clone();
    r.ios[1].tokens = 1;
    assert_eq!(
        r.forward().unwrap_err(),
        EpError::UnequalTokens { rank: 1, tokens: 1, first_rank: 0, first: 2 }
    );
    r.ios = good.iter().map(|io| ForwardIo { tokens: 3, ..*io }).collect();
    assert_eq!(r.forward().unwrap_err(), EpError::TooManyTokens { tokens: 3, max: 2 });
    r.ios = good.clone();
    r.ios[0].output.bytes -= 2;
    assert!(matches!(
        r.forward().unwrap_err(),
        EpError::Layer(LayerError::BufferTooSmall { buffer: "output", .. })
    ));
    r.ios = good[..1].to_vec();
    assert_eq!(
        r.forward().unwrap_err(),
        EpError::RankCount { what: "forward buffers", given: 1, expected: 2 }
    );
    r.ios = good;
    // A collective of another size.
    r.coll = HostCollective::new(4);
    assert!(matches!(r.forward().unwrap_err(), EpError::Mismatch { rank: 0, .. }));
    let now: Vec<u64> = r.backends.iter().map(|b| b.stats().launches).collect();
    assert_eq!(now, launches, "nothing was launched");
    // The host collective waits for the devices: capturing a step fails, typed, and leaves
    // the backends usable.
    r.coll = HostCollective::new(2);
    let mut bs: Vec<&mut dyn Backend> =
        r.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
    let ws: Vec<&EpWorkspace> = r.workspaces.iter().collect();
    let e = r.ep.capture(&mut r.coll, &mut bs, &ws, &r.ios).unwrap_err();
    assert!(
        matches!(
            e,
            EpError::Collective(CollectiveError::Backend(BackendError::Usage(
                UsageError::DuringCapture { .. }
            )))
        ),
        "{e}"
    );
    r.forward().unwrap();
}

#[test]
fn layers_of_the_wrong_window_are_refused() {
    let mut m = model(61);
    let _ = batch(&mut m, 2, 62, &all_experts());
    let p = EpPartition::new(E, 2, K).unwrap();
    let mut b = sim();
    let shape = MoeShape::new(H, I, p.window(1).unwrap()).unwrap();
    let layer = build_layer(&mut b, &m, config(shape, FinalizeMode::Deterministic), 4);
    let e = ExpertParallel::new(p, &[0], vec![layer]).unwrap_err();
    assert!(matches!(e, EpError::Mismatch { rank: 0, .. }), "{e}");
    assert_eq!(
        ExpertParallel::new(p, &[0, 1], vec![]).unwrap_err(),
        EpError::RankCount { what: "layers", given: 0, expected: 2 }
    );
    assert_eq!(ExpertParallel::new(p, &[], vec![]).unwrap_err(), EpError::ZeroRanks);
    // A workspace spec too small for the gathered tokens names its field.
    let plan = AllGatherPlan::new(p, 4, H, true).unwrap();
    let mut spec =
        plan.workspace_spec(I, TileSize::SM100.to_vec(), Arch::Sm100, ActivationFormat::Nvfp4);
    spec.max_tokens = 4;
    let e = EpWorkspace::new(&mut b, &KernelSet::builtin(), plan.clone(), 0, spec).unwrap_err();
    assert!(e.to_string().contains("max_tokens = 4, the plan needs 8"), "{e}");
    let spec =
        plan.workspace_spec(I, TileSize::SM100.to_vec(), Arch::Sm100, ActivationFormat::Nvfp4);
    assert_eq!(
        EpWorkspace::new(&mut b, &KernelSet::builtin(), plan, 2, spec).unwrap_err(),
        EpError::RankOutOfRange { rank: 2, ranks: 2 }
    );
}

/// The host collective's three operations on known bytes over 3 simulated ranks: what
/// `Collective` promises (and what ep-check asks of NCCL on a GPU).
#[test]
fn host_collective_operations_follow_the_contract() {
    let g = 3;
    let mut backends: Vec<SimBackend> = (0..g).map(|_| sim()).collect();
    let mut coll = HostCollective::new(g);
    let block = 8;
    let mut bufs = Vec::new();
    for (r, b) in backends.iter_mut().enumerate() {
        let send: Vec<u8> = (0..g * block).map(|i| (r * 100 + i) as u8).collect();
        let send = b.upload_new(&send).unwrap();
        let recv = b.alloc(g * block).unwrap();
        bufs.push(Exchange { send, recv });
    }
    let mut bs: Vec<&mut dyn Backend> =
        backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
    // All-gather of each rank's first `block` bytes.
    coll.all_gather(&mut bs, &bufs, block).unwrap();
    for (b, x) in bs.iter_mut().zip(&bufs) {
        let want: Vec<u8> =
            (0..g).flat_map(|r| (0..block).map(move |i| (r * 100 + i) as u8)).collect();
        assert_eq!(b.download(x.recv, g * block).unwrap(), want);
    }
    // All-to-all: block q of rank p lands at block p of rank q.
    coll.all_to_all(&mut bs, &bufs, block).unwrap();
    for (q, (b, x)) in bs.iter_mut().zip(&bufs).enumerate() {
        let want: Vec<u8> =
            (0..g).flat_map(|p| (0..block).map(move |i| (p * 100 + q * block + i) as u8)).collect();
        assert_eq!(b.download(x.recv, g * block).unwrap(), want);
    }
    // Reduce-scatter of bf16: with one non-zero term per element the sum is that term
    // exactly, whatever its magnitude (the deterministic mode's argument).
    let elements = 4;
    let value = |r: usize, j: usize| {
        if j % g == r { bf16::from_f32(1.0 + j as f32 / 128.0 * 3.0e-3) } else { bf16::ZERO }
    };
    for (r, (b, x)) in bs.iter_mut().zip(&bufs).enumerate() {
        let v: Vec<u8> =
            (0..g * elements).flat_map(|j| value(r, j).to_bits().to_le_bytes()).collect();
        b.upload(x.send, &v).unwrap();
    }
    coll.reduce_scatter_bf16(&mut bs, &bufs, elements).unwrap();
    for (r, (b, x)) in bs.iter_mut().zip(&bufs).enumerate() {
        let got = b.download_slice::<bf16>(DeviceSlice::new(x.recv, (elements * 2) as u64));
        let want: Vec<bf16> =
            (0..elements).map(|i| value((r * elements + i) % g, r * elements + i)).collect();
        assert_eq!(got.unwrap(), want, "rank {r}");
    }
    // Lists of the wrong length are refused.
    assert_eq!(
        coll.all_gather(&mut bs[..2], &bufs[..2], block).unwrap_err(),
        CollectiveError::RankCount { what: "backends", given: 2, expected: 3 }
    );
}

#[test]
fn all_to_all_mode_equals_the_single_layer_bit_for_bit() {
    for (g, n, seed) in [(2, 3, 71), (4, 2, 72)] {
        let mut m = model(seed);
        let first = batch(&mut m, g * n, seed + 100, &all_experts());
        let want = single(&m, &first, g * n, FinalizeMode::Deterministic);
        let mut r = ranks_in(EpMode::AllToAll, &m, &first, g, n, FinalizeMode::Deterministic);
        r.forward().unwrap();
        assert_eq!(r.output(), want, "G = {g}, {n} tokens per rank");
        // A second step in the same buffers, other routes, and a route of each rank's first
        // token dropped (NO_ROUTE: packed nowhere, so no row comes back for it). It must
        // read as zero, as a zero-weight route of the single layer does, not as the first
        // step's row at that slot (each rank zeroes its route rows before the unpack).
        let scale = m.input_scale;
        let next = batch(&mut m, g * n, seed + 200, &all_experts());
        m.input_scale = scale;
        let mut ids = next.ids.clone();
        let mut weights = first.weights.clone();
        for rank in 0..g {
            ids[rank * n * K + 1] = moegen_dsl::abi::ep::NO_ROUTE;
            weights[rank * n * K + 1] = 0.0;
        }
        r.set_routing(&ids, &weights);
        r.forward().unwrap();
        let dropped = Batch { x: first.x.clone(), ids: next.ids, weights };
        let want = single(&m, &dropped, g * n, FinalizeMode::Deterministic);
        assert_eq!(r.output(), want, "G = {g}, second step with dropped routes");
    }
}

#[test]
fn all_to_all_edge_cases_stay_bit_identical() {
    let mut m = model(81);
    // Rank 3 of 4 owns experts 12..16, which no token names: it receives only padding.
    let idle = batch(&mut m, 8, 82, &(0..12).collect::<Vec<_>>());
    let want = single(&m, &idle, 8, FinalizeMode::Deterministic);
    let got = run_ep_in(EpMode::AllToAll, &m, &idle, 4, 2, FinalizeMode::Deterministic);
    assert_eq!(got, want, "idle owner");
    // Every route to rank 0 of 2: its blocks full from both ranks, rank 1's all padding.
    let busy = batch_on(&mut m, 4, 83, 0..8);
    let want = single(&m, &busy, 4, FinalizeMode::Deterministic);
    let got = run_ep_in(EpMode::AllToAll, &m, &busy, 2, 2, FinalizeMode::Deterministic);
    assert_eq!(got, want, "one busy owner");
}

#[test]
fn bulk_all_to_all_is_within_the_bulk_order_slack() {
    for (g, n, seed) in [(2, 3, 91), (4, 2, 92)] {
        let mut m = model(seed);
        let batch = batch(&mut m, g * n, seed + 100, &all_experts());
        let want = single(&m, &batch, g * n, FinalizeMode::BulkReduceAdd);
        let got = run_ep_in(EpMode::AllToAll, &m, &batch, g, n, FinalizeMode::BulkReduceAdd);
        let slack = bulk_slack(&m, &batch, g * n);
        for (j, ((a, b), s)) in got.iter().zip(&want).zip(&slack).enumerate() {
            let d = (f64::from(a.to_f32()) - f64::from(b.to_f32())).abs();
            assert!(d <= *s, "G = {g}, element {j}: {a} vs {b}, slack {s}");
        }
        // Stronger, by construction: each owner's bulk top-1 row is its route row exactly
        // (one row added onto zeros), and the home sums rows in slot order, so the bulk
        // mode (b) is the single layer's deterministic output.
        let det = single(&m, &batch, g * n, FinalizeMode::Deterministic);
        assert_eq!(got, det, "G = {g}: bulk mode (b) is the slot-order sum");
    }
}

#[test]
fn all_to_all_names_bad_routes_on_their_home_rank() {
    let mut m = model(101);
    let batch = batch(&mut m, 4, 102, &all_experts());
    let mut r = ranks_in(EpMode::AllToAll, &m, &batch, 2, 2, FinalizeMode::Deterministic);
    // Rank 1's token 1, slot 2: −1, the commonest wrong id (the step runs; the record says).
    let mut ids = batch.ids.clone();
    ids[2 * K + K + 2] = -1;
    r.set_routing(&ids, &batch.weights);
    r.forward().unwrap();
    let inner = EpError::ExpertOutOfRange { token: 1, slot: 2, id: -1, experts: E };
    assert_eq!(r.check_errors(), Err(EpError::OnRank { rank: 1, error: Box::new(inner) }));
    // A duplicate expert of rank 0's token 0, named as the single layer names it.
    let mut ids = batch.ids.clone();
    ids[1] = ids[0];
    r.set_routing(&ids, &batch.weights);
    r.forward().unwrap();
    let inner = EpError::Input(moegen_runtime::RuntimeError::DuplicateExpert {
        token: 0,
        slot: 1,
        earlier_slot: 0,
        expert: i64::from(ids[0]),
    });
    assert_eq!(r.check_errors(), Err(EpError::OnRank { rank: 0, error: Box::new(inner) }));
    // The record is reset each step: good routing again reads clean.
    r.set_routing(&batch.ids, &batch.weights);
    r.forward().unwrap();
    r.check_errors().unwrap();
}

#[test]
fn all_to_all_refuses_mismatched_layers_and_workspaces_before_any_launch() {
    let mut m = model(111);
    let batch = batch(&mut m, 4, 112, &all_experts());
    let mut r = ranks_in(EpMode::AllToAll, &m, &batch, 2, 2, FinalizeMode::Deterministic);
    let launches: Vec<u64> = r.backends.iter().map(|b| b.stats().launches).collect();
    let good = r.ios.clone();
    r.ios = good.iter().map(|io| ForwardIo { tokens: 3, ..*io }).collect();
    assert_eq!(r.forward().unwrap_err(), EpError::TooManyTokens { tokens: 3, max: 2 });
    r.ios = good;
    // A mode (a) workspace under the mode (b) layer.
    let p = EpPartition::new(E, 2, K).unwrap();
    let plan = AllGatherPlan::new(p, 2, H, true).unwrap();
    let spec =
        plan.workspace_spec(I, TileSize::SM100.to_vec(), Arch::Sm100, ActivationFormat::Nvfp4);
    let a = EpWorkspace::new(&mut r.backends[0], &KernelSet::builtin(), plan, 0, spec).unwrap();
    let mut bs: Vec<&mut dyn Backend> =
        r.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
    let ws = [&a, &r.workspaces[1]];
    let e = r.ep.forward(&mut r.coll, &mut bs, &ws, &r.ios).unwrap_err();
    assert!(
        matches!(&e, EpError::Mismatch { rank: 0, reason } if reason.contains("AllGather")),
        "{e}"
    );
    drop(bs);
    let now: Vec<u64> = r.backends.iter().map(|b| b.stats().launches).collect();
    assert_eq!(now, launches, "nothing was launched");
    // The host collective cannot be captured: typed, and the backends stay usable.
    let mut bs: Vec<&mut dyn Backend> =
        r.backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
    let ws: Vec<&EpWorkspace> = r.workspaces.iter().collect();
    let e = r.ep.capture(&mut r.coll, &mut bs, &ws, &r.ios).unwrap_err();
    assert!(
        matches!(
            e,
            EpError::Collective(CollectiveError::Backend(BackendError::Usage(
                UsageError::DuringCapture { .. }
            )))
        ),
        "{e}"
    );
    drop(bs);
    r.forward().unwrap();
    r.check_errors().unwrap();
    // Mode (b) needs top-1 layers: the top-k layer of mode (a) is refused, and a top-1
    // workspace spec is what the plan asks for.
    let mut b = sim();
    let shape = MoeShape::new(H, I, p.window(0).unwrap()).unwrap();
    let layer = build_layer(&mut b, &m, config(shape, FinalizeMode::Deterministic), 8);
    let e = ExpertParallel::with_mode(p, EpMode::AllToAll, &[0], vec![layer]).unwrap_err();
    assert!(matches!(e, EpError::Mismatch { rank: 0, .. }), "{e}");
    let plan = AllToAllPlan::new(p, 2, H).unwrap();
    let mut spec = plan.workspace_spec(
        I,
        TileSize::SM100.to_vec(),
        true,
        Arch::Sm100,
        ActivationFormat::Nvfp4,
    );
    spec.top_k = K;
    let e = EpWorkspace::new(&mut b, &KernelSet::builtin(), plan, 0, spec).unwrap_err();
    assert!(e.to_string().contains("top_k = 4, the plan needs 1"), "{e}");
}

#[test]
fn a_router_s_padding_id_is_refused_outside_expert_parallelism() {
    // Only mode (b)'s owner sorts with NO_ROUTE skipped (its own padding); a router's ids
    // reaching a single layer from the host, the CPU reference or the f64 oracle are
    // refused, named at the first offending route, before anything runs. (On the device
    // the layer's sort reports it: validation/tests/layer_check_sim.rs.)
    use moegen_dsl::abi::ep::NO_ROUTE;
    use moegen_runtime::RuntimeError;
    let mut m = model(121);
    let mut bt = batch(&mut m, 2, 122, &all_experts());
    bt.ids[K + 1] = NO_ROUTE;
    let want = RuntimeError::ExpertOutOfRange {
        token: 1,
        slot: 1,
        expert: i64::from(NO_ROUTE),
        experts: E,
    };
    let mut b = sim();
    let (layer, ws) = single_layer(&mut b, &m, 2, FinalizeMode::Deterministic);
    let shape = layer.config().shape;
    let launches = b.stats().launches;
    let e = layer.forward_host(&mut b, &ws, 2, &bt.x, &bt.ids, &bt.weights).unwrap_err();
    assert_eq!(e, LayerError::Input(want.clone()));
    assert_eq!(b.stats().launches, launches, "refused before any launch");
    let routing = Routing { tokens: 2, experts: bt.ids.clone(), weights: bt.weights.clone() };
    let w = prepared(&m, &shape);
    let xf: Vec<f32> = bt.x.iter().map(|v| v.to_f32()).collect();
    let acts = quantize_activations(&xf, 2, H, m.input_scale).unwrap();
    let opts = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let e = moe_reference(&shape, &acts, &w, &routing, TileSize::T128, opts).unwrap_err();
    assert_eq!(e, want);
    let (up, gate, down) = (&m.up[..], &m.gate[..], &m.down[..]);
    assert_eq!(oracle_moe(&shape, &xf, up, gate, down, &routing).unwrap_err(), want);
    // An earlier −1 is the first offender, as on the device.
    bt.ids[2] = -1;
    let e = layer.forward_host(&mut b, &ws, 2, &bt.x, &bt.ids, &bt.weights).unwrap_err();
    assert!(matches!(
        e,
        LayerError::Input(RuntimeError::ExpertOutOfRange { token: 0, slot: 2, expert: -1, .. })
    ));
}

#[test]
fn mode_a_reports_a_router_s_padding_id_at_its_gathered_route() {
    // Mode (a)'s ranks sort the gathered ids, the callers' own: NO_ROUTE there is a wrong
    // id, reported from the device record (rank 0's layer, which sorts every rank's routes
    // first, names rank 1's token 1 as gathered token 2 + 1), while mode (b) drops it.
    use moegen_dsl::abi::ep::NO_ROUTE;
    use moegen_runtime::RuntimeError;
    let mut m = model(131);
    let batch = batch(&mut m, 4, 132, &all_experts());
    let mut ids = batch.ids.clone();
    ids[2 * K + K + 2] = NO_ROUTE;
    let mut r = ranks_in(EpMode::AllGather, &m, &batch, 2, 2, FinalizeMode::Deterministic);
    r.set_routing(&ids, &batch.weights);
    r.forward().unwrap();
    let want = RuntimeError::ExpertOutOfRange {
        token: 3,
        slot: 2,
        expert: i64::from(NO_ROUTE),
        experts: E,
    };
    assert_eq!(r.check_errors(), Err(EpError::Layer(LayerError::Input(want))));
    let mut r = ranks_in(EpMode::AllToAll, &m, &batch, 2, 2, FinalizeMode::Deterministic);
    r.set_routing(&ids, &batch.weights);
    r.forward().unwrap();
    assert_eq!(r.check_errors(), Ok(()));
}
