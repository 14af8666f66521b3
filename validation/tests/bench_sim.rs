//! moe-bench's engine on the simulator: the folder contract is written, the layer is tuned
//! and replayed from a graph, and the output it leaves for the peer runner is the reference's
//! on the same (exactly converted) weights.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::{KernelInfo, SimtTarget};
use moegen_dsl::{FinalizeMode, TileSize};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::backend::{
    Backend, BackendError, BackendStats, DevicePtr, EventId, GraphId, KernelArg, LaunchShape,
    TensorMapSpec, UsageError,
};
use moegen_runtime::layer::{MoeLayer, TuneOptions};
use moegen_runtime::reference::*;
use moegen_validation::bench::*;

fn npy_payload(path: &std::path::Path) -> Vec<u8> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let header = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + header..].to_vec()
}

/// A layer the simulator runs in seconds: experts 2..6 of 8 local, top 2.
fn tiny(tokens: Vec<usize>) -> BenchShape {
    BenchShape {
        name: "tiny",
        hidden: 512,
        intermediate: 256,
        experts: 8,
        local_experts: 4,
        expert_offset: 2,
        top_k: 2,
        tokens,
    }
}

#[test]
fn the_bench_writes_the_contract_and_moegen_matches_the_reference() {
    let shape = tiny(vec![3, 6]);
    let dir = std::env::temp_dir().join(format!("moegen-bench-sim-{}", std::process::id()));
    let work = Workload::synth(shape.clone(), 5);
    let (weights, inputs) = (&work.weights, &work.inputs);
    for inp in inputs {
        for t in 0..inp.tokens {
            let ids = &inp.ids[t * 2..t * 2 + 2];
            assert_ne!(ids[0], ids[1], "distinct experts per token");
            let s: f32 = inp.weights[t * 2..t * 2 + 2].iter().sum();
            assert!((s - 1.0).abs() < 1e-5);
        }
    }
    work.write(&dir).unwrap();
    for f in ["inputs.json", "x_3.npy", "ids_6.npy", "w_6.npy", "w1_mxfp4.npz", "w2_mxfp4.npz"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("inputs.json")).unwrap()).unwrap();
    assert_eq!(json["shape"]["expert_offset"], 2);
    assert_eq!(json["cases"][1]["tokens"], 6);
    assert_eq!(npy_payload(&dir.join("ids_3.npy")).len(), 3 * 2 * 4);

    let ms = shape.moe_shape().unwrap();
    let v = VARIANTS.iter().copied().find(|v| v.name == "nvfp4-a4").unwrap();
    let mut sim = SimBackend::new().with_sm_count(4);
    let config = moegen_runtime::layer::LayerConfig::new(ms);
    let kernels = moegen_runtime::layer::KernelSet::builtin();
    let all =
        MoeLayer::candidates(&config, &kernels, 6, moegen_dsl::Arch::Sm100, WeightFormat::Nvfp4)
            .unwrap();
    let opts = BenchOptions {
        warmup: 1,
        iters: 2,
        tune: Some(TuneOptions {
            warmup: 0,
            iterations: 1,
            tactics: Some(all[..2].to_vec()),
            cache: None,
            progress: false,
        }),
        finalize: FinalizeMode::BulkReduceAdd,
        flush_l2: Some(1 << 16),
        epilogue: moegen_dsl::EpilogueSpec::PLAIN,
        tactics: None,
        settle_ms: 0,
    };
    let before = sim.stats();
    let rows = bench_variant(&mut sim, &dir, &work, v, &opts, &mut |_| {}).unwrap();
    let after = sim.stats();
    assert_eq!(
        after.allocations - before.allocations,
        after.frees - before.frees,
        "a variant gives back everything it allocated (weights, workspace, inputs, flush buffer)"
    );
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.tuned && r.samples.len() == 2 && r.ms > 0.0));
    assert!(rows.iter().all(|r| all[..2].iter().any(|t| t.to_string() == r.tactic)));
    // Each row counts its input's routes to experts 2..6 and the distinct ones among them.
    for (r, inp) in rows.iter().zip(inputs) {
        let mut local: Vec<i32> =
            inp.ids.iter().copied().filter(|id| (2..6).contains(id)).collect();
        assert_eq!(r.local_routes, local.len());
        local.sort_unstable();
        local.dedup();
        assert_eq!(r.live_experts, local.len());
    }
    assert!(rows.iter().any(|r| r.local_routes > r.live_experts), "a draw with a shared expert");

    // Named tactics: each one alone, every input, in the order named; untuned.
    let names: Vec<String> = all[..2].iter().rev().map(ToString::to_string).collect();
    assert!(rows.iter().all(|r| r.burst_ms.is_none()), "no back-to-back figure with a flush");
    let named =
        BenchOptions { tune: None, tactics: Some(names.clone()), flush_l2: None, ..opts.clone() };
    let before = sim.stats();
    let rows = bench_variant(&mut sim, &dir, &work, v, &named, &mut |_| {}).unwrap();
    let after = sim.stats();
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
    let got: Vec<(&str, usize)> = rows.iter().map(|r| (r.tactic.as_str(), r.tokens)).collect();
    let want: Vec<(&str, usize)> =
        names.iter().flat_map(|n| [(n.as_str(), 3), (n.as_str(), 6)]).collect();
    assert_eq!(got, want);
    assert!(rows.iter().all(|r| !r.tuned));
    // Without a flush, the back-to-back replays: on the simulator (instruction counts) the
    // same work per pass as each single replay.
    for r in &rows {
        let burst = r.burst_ms.expect("a back-to-back figure without a flush");
        assert!((burst - r.ms).abs() <= 1e-6 * r.ms, "{}: {burst} against {}", r.tactic, r.ms);
    }
    // A name that is not a candidate is refused by name, and the layer still goes back.
    let bad = BenchOptions { tactics: Some(vec!["t999:none".to_owned()]), ..named };
    let before = sim.stats();
    let err = bench_variant(&mut sim, &dir, &work, v, &bad, &mut |_| {}).unwrap_err();
    let after = sim.stats();
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
    assert!(matches!(&err, BenchError::UnknownTactic { name, .. } if name == "t999:none"), "{err}");
    assert!(err.to_string().contains(&names[0]), "the message lists the candidates: {err}");

    // The output left for peers.py is the SM100 reference on the exactly converted weights.
    let inp = &inputs[0];
    let gs_x = input_scale(inputs).unwrap();
    fn t(m: &MxMatrix) -> Mxfp4Tensor<'_> {
        Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
    }
    let experts: Vec<_> = weights
        .iter()
        .map(|e| ExpertTensors { up: t(&e.up), gate: t(&e.gate), down: t(&e.down) })
        .collect();
    let prepared = import_mxfp4(&ms, &experts, gs_x, FC2_INPUT_SCALE).unwrap();
    let xf: Vec<f32> = inp.x.iter().map(|v| v.to_f32()).collect();
    let acts = quantize_activations(&xf, 3, 512, gs_x).unwrap();
    let routing = Routing { tokens: 3, experts: inp.ids.clone(), weights: inp.weights.clone() };
    let want = moe_reference(&ms, &acts, &prepared, &routing, TileSize::T128, Default::default())
        .unwrap()
        .output;
    let got: Vec<bf16> = npy_payload(&dir.join("out_nvfp4-a4_3.npy"))
        .chunks_exact(2)
        .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
        .collect();
    assert_eq!(got, want);
    assert!(want.iter().any(|v| v.to_f32().abs() > 0.01), "a non-trivial output");
    std::fs::remove_dir_all(&dir).ok();
}

/// The simulator, but every graph replay fails (with an error nothing else here gives): a
/// token count's timing fails after its inputs are uploaded and its graph captured. Counts
/// the graphs made and dropped.
struct ReplayFails {
    sim: SimBackend,
    captured: u32,
    dropped: u32,
}

const REPLAY_FAILS: UsageError = UsageError::UnknownEvent { event: 987_654_321 };

impl Backend for ReplayFails {
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError> {
        self.sim.alloc(bytes)
    }
    fn free(&mut self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.sim.free(ptr)
    }
    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError> {
        self.sim.upload(ptr, bytes)
    }
    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError> {
        self.sim.download(ptr, len)
    }
    fn launch(
        &mut self,
        kernel: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        self.sim.launch(kernel, shape, args)
    }
    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError> {
        self.sim.encode_tensor_map(spec)
    }
    fn simt_target(&self) -> SimtTarget {
        self.sim.simt_target()
    }
    fn sm_count(&self) -> u32 {
        self.sim.sm_count()
    }
    fn resident_clusters(
        &mut self,
        kernel: &'static KernelInfo,
        dynamic_smem: u32,
    ) -> Result<Option<u32>, BackendError> {
        self.sim.resident_clusters(kernel, dynamic_smem)
    }
    fn memset(&mut self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<(), BackendError> {
        self.sim.memset(ptr, value, bytes)
    }
    fn synchronize(&mut self) -> Result<(), BackendError> {
        self.sim.synchronize()
    }
    fn stats(&self) -> BackendStats {
        self.sim.stats()
    }
    fn begin_capture(&mut self) -> Result<(), BackendError> {
        self.sim.begin_capture()
    }
    fn end_capture(&mut self) -> Result<GraphId, BackendError> {
        self.captured += 1;
        self.sim.end_capture()
    }
    fn replay(&mut self, _: GraphId) -> Result<(), BackendError> {
        Err(REPLAY_FAILS.into())
    }
    fn drop_graph(&mut self, graph: GraphId) -> Result<(), BackendError> {
        self.dropped += 1;
        self.sim.drop_graph(graph)
    }
    fn record_event(&mut self) -> Result<EventId, BackendError> {
        self.sim.record_event()
    }
    fn elapsed_ms(&mut self, start: EventId, end: EventId) -> Result<f32, BackendError> {
        self.sim.elapsed_ms(start, end)
    }
    fn device_key(&self) -> String {
        self.sim.device_key()
    }
}

/// A token count that fails part-way (its graph's replay) still gives back its inputs, its
/// output buffer and its graph, and the layer and workspace go back too; the replay's error
/// is the one reported.
#[test]
fn a_failed_timing_gives_back_the_cases_buffers() {
    let dir = std::env::temp_dir().join(format!("moegen-bench-fail-{}", std::process::id()));
    let work = Workload::synth(tiny(vec![3]), 5);
    let v = VARIANTS.iter().copied().find(|v| v.name == "nvfp4-a4").unwrap();
    let mut b = ReplayFails { sim: SimBackend::new().with_sm_count(4), captured: 0, dropped: 0 };
    let opts = BenchOptions {
        warmup: 1,
        iters: 1,
        tune: None,
        finalize: FinalizeMode::BulkReduceAdd,
        flush_l2: None,
        epilogue: moegen_dsl::EpilogueSpec::PLAIN,
        tactics: None,
        settle_ms: 0,
    };
    let before = b.stats();
    let err = bench_variant(&mut b, &dir, &work, v, &opts, &mut |_| {}).unwrap_err();
    let after = b.stats();
    assert!(matches!(err, BenchError::Backend { .. }), "{err}");
    assert!(err.to_string().contains(&REPLAY_FAILS.to_string()), "{err}");
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
    assert_eq!((b.captured, b.dropped), (1, 1), "the case's graph went back");
}
