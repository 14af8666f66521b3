//! A layer that cannot run says why: the candidate list names each rejected tactic's reason
//! (shape multiple, finalize mode, format, target), `Workspace::new` refuses a spec no kernel
//! of the set can serve, naming the field, and the typed host-buffer helpers round-trip.

use half::bf16;
use moegen_dsl::abi::KernelId;
use moegen_dsl::{GemmKind, GemmTactic, Raster};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::*;

fn shape(hidden: usize, intermediate: usize) -> MoeShape {
    MoeShape::new(hidden, intermediate, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap()
}

/// The built-in kernels for which `keep` holds (every SIMT kernel kept).
fn builtin_where(keep: impl Fn(&moegen_dsl::abi::GemmKey) -> bool) -> KernelSet {
    let builtin = KernelSet::builtin();
    KernelSet::new(builtin.kernels().iter().copied().filter(|k| match &k.id {
        KernelId::Gemm(g) => keep(g),
        _ => true,
    }))
}

/// The README's former `moe_kernels!` tactic: 128-row tiles, GEMM1 N 128, GEMM2 N 256 over
/// a 2-wide cluster (so H must give at least two 256-column tiles, the last possibly
/// partial).
fn wide_gemm2_set() -> (KernelSet, MoeTactic) {
    let g1 = GemmTactic::new(GemmKind::Gemm1, [128, 128], [1, 1], Raster::AlongN).unwrap();
    let g2 = GemmTactic::new(GemmKind::Gemm2, [128, 256], [1, 2], Raster::AlongN).unwrap();
    let tactic = MoeTactic::new(TileSize::T128, g1, g2).unwrap();
    let set =
        builtin_where(|k| k.arch() == Arch::Sm100 && k.tactic().is_ok_and(|t| t == g1 || t == g2));
    (set, tactic)
}

fn no_candidates(e: LayerError) -> NoCandidates {
    match e {
        LayerError::NoCandidates(n) => n,
        other => panic!("expected NoCandidates, got {other}"),
    }
}

#[test]
fn a_hidden_size_the_clusters_cannot_cover_is_the_reason_given() {
    let (set, tactic) = wide_gemm2_set();
    let config = LayerConfig::new(shape(256, 256));
    let e = MoeLayer::candidates(&config, &set, 8, Arch::Sm100, WeightFormat::Nvfp4).unwrap_err();
    let message = e.to_string();
    let n = no_candidates(e);
    assert_eq!(n.rejected.len(), 16, "every SM100 tactic is accounted for");
    let mine = n.rejected.iter().find(|r| r.tactic == tactic).unwrap();
    assert_eq!(
        mine.reason,
        Rejection::NotCovered {
            gemm: *tactic.gemm2(),
            dim: "hidden size",
            value: 256,
            rows_per_value: 1,
            next: Some(320)
        }
    );
    let others = n.rejected.iter().filter(|r| matches!(r.reason, Rejection::NotInSet { .. }));
    assert_eq!(others.count(), 15, "the other tactics are not in the set");
    assert!(message.contains("hidden size = 256"), "{message}");
    assert!(message.contains("its clusters need at least 2"), "{message}");
    assert!(message.contains("the next hidden size it serves: 320"), "{message}");
    assert!(
        message.starts_with(
            "no tactic of the kernel set applies: 16 Sm100 tactics considered: 15 × GEMM not in \
             the kernel set (e.g. t128:"
        ),
        "{message}"
    );
    // A summary, not a list of every tactic.
    assert!(message.len() < 600, "{} characters: {message}", message.len());
    // At H = 512 the same set serves the layer.
    let config = LayerConfig::new(shape(512, 256));
    let ok = MoeLayer::candidates(&config, &set, 8, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    assert_eq!(ok, vec![tactic]);
}

#[test]
fn a_deterministic_only_set_names_the_bulk_layers_finalize_mode() {
    let set = builtin_where(|k| {
        k.arch() == Arch::Sm100
            && (k.gemm == GemmKind::Gemm1 || k.finalize == FinalizeMode::Deterministic)
    });
    let config = LayerConfig::new(shape(512, 256));
    assert_eq!(config.finalize, FinalizeMode::BulkReduceAdd, "the default the README's reader hit");
    let e = MoeLayer::candidates(&config, &set, 8, Arch::Sm100, WeightFormat::Nvfp4).unwrap_err();
    let message = e.to_string();
    let n = no_candidates(e);
    assert!(
        n.rejected.iter().all(|r| matches!(
            &r.reason,
            Rejection::Finalize { wanted: FinalizeMode::BulkReduceAdd, present, .. }
                if present == &[FinalizeMode::Deterministic]
        )),
        "{message}"
    );
    assert!(message.contains("16 × finalize mode not in the kernel set"), "{message}");
    assert!(message.contains("finalize Deterministic, the layer's finalize is BulkReduceAdd"));
    // The deterministic layer runs on it.
    let det = LayerConfig { finalize: FinalizeMode::Deterministic, ..config };
    let ok = MoeLayer::candidates(&det, &set, 8, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    assert_eq!(ok.len(), 16);
}

#[test]
fn format_target_and_shape_multiple_are_named() {
    let config = LayerConfig::new(shape(512, 256));
    let builtin = KernelSet::builtin();
    // MXFP4 weights with NVFP4 activations: SM100 multiplies MXFP4 by MXFP8 only.
    let e = MoeLayer::candidates(&config, &builtin, 8, Arch::Sm100, WeightFormat::Mxfp4);
    let n = no_candidates(e.unwrap_err());
    assert!(n.rejected.iter().all(|r| matches!(r.reason, Rejection::Refused { .. })));
    assert!(n.to_string().contains("MXFP4 weights without MXFP8 activations"), "{n}");
    // With MXFP8 activations every tactic is served by the built-in set; MXFP8 with NVFP4
    // weights is refused by name.
    let mx = LayerConfig { activations: ActivationFormat::Mxfp8, ..config };
    let ok = MoeLayer::candidates(&mx, &builtin, 8, Arch::Sm100, WeightFormat::Mxfp4).unwrap();
    assert_eq!(ok.len(), 16);
    let e = MoeLayer::candidates(&mx, &builtin, 8, Arch::Sm100, WeightFormat::Nvfp4);
    let n = no_candidates(e.unwrap_err());
    assert!(n.to_string().contains("MXFP8 activations with NVFP4 weights"), "{n}");
    // An SM100 set asked for a Hopper layer.
    let sm100 = builtin_where(|k| k.arch() == Arch::Sm100);
    let bf16_config = LayerConfig { activations: ActivationFormat::Bf16, ..config };
    let e = MoeLayer::candidates(&bf16_config, &sm100, 8, Arch::Sm90, WeightFormat::Nvfp4);
    let n = no_candidates(e.unwrap_err());
    assert!(
        n.rejected
            .iter()
            .all(|r| matches!(r.reason, Rejection::OtherArch { arch: Arch::Sm90, .. })),
        "{n}"
    );
    // Hopper NVFP4 kernels exist for bf16 and NVFP4 activations, not FP8 (A8 is MXFP4 only).
    let fp8 = LayerConfig { activations: ActivationFormat::Fp8, ..config };
    let e = MoeLayer::candidates(&fp8, &builtin, 8, Arch::Sm90, WeightFormat::Nvfp4);
    let n = no_candidates(e.unwrap_err());
    assert!(n.to_string().to_lowercase().contains("fp8"), "{n}");
    // H not a multiple of the SM100 MMA's K (64): every tactic in the set says so.
    let config = LayerConfig::new(shape(400, 256));
    let e = MoeLayer::candidates(&config, &builtin, 8, Arch::Sm100, WeightFormat::Nvfp4);
    let n = no_candidates(e.unwrap_err());
    assert!(n.rejected.iter().all(|r| matches!(r.reason, Rejection::Shape(_))), "{n}");
    assert!(n.to_string().contains("hidden size = 400 is not a multiple of 64"), "{n}");
}

#[test]
fn a_dispatch_choice_the_layer_cannot_run_is_named_with_its_reason() {
    let (set, tactic) = wide_gemm2_set();
    let s = shape(256, 256);
    let mut sim = SimBackend::new().with_sm_count(4);
    let up = vec![0.01f32; 4 * 256 * 256];
    let prepared = moegen_runtime::reference::prepare_weights(&s, &up, &up, &up, 1.0, 1.0).unwrap();
    let weights = LayerWeights::upload(&mut sim, &s, &prepared, 1.0).unwrap();
    let dev = DeviceModel::b200().with_sms(4);
    let table = DispatchTable::analytic(&s, 8, &[tactic], &dev).unwrap();
    let e = MoeLayer::new(&sim, LayerConfig::new(s), weights, &set, table).unwrap_err();
    assert!(
        matches!(&e, LayerError::TacticRejected { tactic: t, reason } if *t == tactic && matches!(**reason, Rejection::NotCovered { .. })),
        "{e}"
    );
}

fn spec(max_hidden: usize, tiles: &[TileSize], deterministic: bool) -> WorkspaceSpec {
    WorkspaceSpec {
        max_tokens: 8,
        top_k: 2,
        max_local_experts: 4,
        max_hidden,
        max_intermediate: 256,
        tile_sizes: tiles.to_vec(),
        deterministic,
        arch: Arch::Sm100,
        activations: ActivationFormat::Nvfp4,
    }
}

fn refusal(r: Result<Workspace, LayerError>) -> WorkspaceRefusal {
    match r {
        Err(LayerError::WorkspaceRefused(w)) => w,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, got a workspace"),
    }
}

#[test]
fn workspace_new_refuses_a_spec_no_kernel_of_the_set_can_serve() {
    let mut sim = SimBackend::new();
    let before = sim.stats().allocations;
    let (set, _) = wide_gemm2_set();
    // H 256: one 256-column tile, and the only GEMM2 multicasts over two.
    let w = refusal(Workspace::new(&mut sim, &set, spec(256, &[TileSize::T128], false)));
    assert!(matches!(w, WorkspaceRefusal::NotCovered { field: "max_hidden", value: 256, .. }));
    let message = w.to_string();
    assert!(message.starts_with("max_hidden = 256"), "{message}");
    // 320: two tiles, the second 64 columns wide.
    assert!(message.contains("the next hidden size it serves: 320"), "{message}");
    // Not a multiple of the MMA's K.
    let w = refusal(Workspace::new(&mut sim, &set, spec(640 - 16, &[TileSize::T128], false)));
    assert_eq!(
        w.to_string(),
        "max_hidden = 624 is not a multiple of 64 (the sm_100 GEMM kernels' K = 64 MMAs)"
    );
    // A tile size the set has no tactic for.
    let w = refusal(Workspace::new(&mut sim, &set, spec(512, &[TileSize::T256], false)));
    assert_eq!(
        w.to_string(),
        "tile_sizes: tile 256 is not served: the set's Sm100 tactics use tiles {128}"
    );
    let w = refusal(Workspace::new(&mut sim, &set, spec(512, &[TileSize::T64], false)));
    assert!(matches!(w, WorkspaceRefusal::Tile { tile: TileSize::T64, .. }), "{w}");
    // Bulk reduce asked of a deterministic-only set, and the other way round.
    let det_only = builtin_where(|k| {
        k.arch() == Arch::Sm100
            && (k.gemm == GemmKind::Gemm1 || k.finalize == FinalizeMode::Deterministic)
    });
    let w = refusal(Workspace::new(&mut sim, &det_only, spec(512, &[TileSize::T128], false)));
    assert!(matches!(w, WorkspaceRefusal::Finalize { deterministic: false, .. }), "{w}");
    let w =
        refusal(Workspace::new(&mut sim, &set_without_det(), spec(512, &[TileSize::T128], true)));
    assert!(matches!(w, WorkspaceRefusal::Finalize { deterministic: true, .. }), "{w}");
    // A Hopper workspace from an SM100 set.
    let hopper = WorkspaceSpec { arch: Arch::Sm90, ..spec(512, &[TileSize::T64], false) };
    let w = refusal(Workspace::new(&mut sim, &set, hopper));
    assert_eq!(w, WorkspaceRefusal::NoKernels { arch: Arch::Sm90 });
    assert_eq!(sim.stats().allocations, before, "nothing allocated for a refused spec");
    // The engine's memory is checked the same way.
    let memory = DeviceSlice::new(moegen_runtime::backend::DevicePtr(0), 1 << 30);
    let w = refusal(Workspace::from_device(&set, spec(256, &[TileSize::T128], false), memory));
    assert!(matches!(w, WorkspaceRefusal::NotCovered { .. }), "{w}");
    // A servable spec is accepted.
    let ws = Workspace::new(&mut sim, &set, spec(512, &[TileSize::T128], true)).unwrap();
    ws.release(&mut sim).unwrap();
}

fn set_without_det() -> KernelSet {
    builtin_where(|k| k.arch() == Arch::Sm100 && k.finalize == FinalizeMode::BulkReduceAdd)
}

#[test]
fn typed_buffers_round_trip_and_refuse_partial_elements() {
    let mut sim = SimBackend::new();
    let x = [bf16::from_f32(1.5), bf16::from_f32(-2.0), bf16::from_f32(0.0)];
    let d = sim.upload_slice(&x).unwrap();
    assert_eq!(d.bytes, 6);
    assert_eq!(sim.download(d.ptr, 6).unwrap(), [0xc0, 0x3f, 0x00, 0xc0, 0x00, 0x00]);
    assert_eq!(sim.download_slice::<bf16>(d).unwrap(), x);
    let ids = sim.upload_slice(&[3i32, -1, 7]).unwrap();
    assert_eq!(sim.download_slice::<i32>(ids).unwrap(), [3, -1, 7]);
    let w = sim.upload_slice(&[0.25f32, 0.75]).unwrap();
    assert_eq!(sim.download_slice::<f32>(w).unwrap(), [0.25, 0.75]);
    let out = sim.alloc_slice::<bf16>(5).unwrap();
    assert_eq!(out.bytes, 10);
    assert_eq!(sim.download_slice::<bf16>(out).unwrap(), vec![bf16::ZERO; 5]);
    // Six bytes are not a whole number of f32s.
    let e = sim.download_slice::<f32>(d).unwrap_err();
    assert_eq!(
        e,
        LayerError::HostBuffer(HostBufferError::PartialElement {
            element: "f32",
            element_bytes: 4,
            bytes: 6
        })
    );
    let e = sim.alloc_slice::<f32>(usize::MAX).unwrap_err();
    assert!(matches!(e, LayerError::HostBuffer(HostBufferError::TooLarge { .. })), "{e}");
    // Through `dyn Backend` as well (what the layer API takes).
    let b: &mut dyn Backend = &mut sim;
    let d = b.upload_slice(&[1i32]).unwrap();
    assert_eq!(b.download_slice::<i32>(d).unwrap(), [1]);
}

/// Weights in the engine's memory are laid out for a gated W1 (2I rows): an ungated
/// activation (ReLU², I rows) is refused by name when the engine adds its epilogue.
#[test]
fn engine_weights_refuse_an_ungated_activation() {
    use moegen_dsl::{Activation, ActivationFormat, Arch, EpilogueSpec, WeightFormat};
    let s = shape(256, 128);
    let mut sim = SimBackend::hopper();
    let mut buffers = Vec::new();
    let sizes =
        LayerWeights::sizes_for(&s, Arch::Sm90, WeightFormat::Mxfp4, ActivationFormat::Bf16)
            .unwrap();
    for (buf, bytes) in sizes {
        let ptr = sim.alloc(bytes as usize).unwrap();
        buffers.push((buf, DeviceSlice::new(ptr, bytes)));
    }
    let w = LayerWeights::from_device(
        &s,
        Arch::Sm90,
        WeightFormat::Mxfp4,
        ActivationFormat::Bf16,
        &buffers,
    )
    .unwrap();
    let spec = EpilogueSpec { activation: Activation::Relu2, ..EpilogueSpec::PLAIN };
    let e = w.with_device_epilogue(spec, &[]).unwrap_err().to_string();
    assert!(e.contains("with_device_epilogue") && e.contains("relu2"), "{e}");
}

/// The weight sizes are per target, format and activations: SM100 layers take NVFP4
/// weights with NVFP4 activations and MXFP4 with MXFP8, Hopper's A8 takes MXFP4; the
/// refusals name the input.
#[test]
fn weight_sizes_refuse_formats_the_target_does_not_take() {
    use moegen_dsl::{ActivationFormat, Arch, WeightFormat};
    let s = shape(256, 128);
    let e = LayerWeights::sizes_for(&s, Arch::Sm100, WeightFormat::Mxfp4, ActivationFormat::Nvfp4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sizes_for") && e.contains("MXFP4 with MXFP8"), "{e}");
    let e = LayerWeights::sizes_for(&s, Arch::Sm100, WeightFormat::Nvfp4, ActivationFormat::Bf16)
        .unwrap_err()
        .to_string();
    assert!(e.contains("SM100 layers take NVFP4 or MXFP8 activations"), "{e}");
    let e = LayerWeights::sizes_for(&s, Arch::Sm100, WeightFormat::Nvfp4, ActivationFormat::Mxfp8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("MXFP8 activations run on SM100 with MXFP4 weights"), "{e}");
    // MXFP4 on SM100: K padded to 128 codes (256 here: no padding), a byte per two codes.
    let mx = LayerWeights::sizes(&s, Arch::Sm100, WeightFormat::Mxfp4).unwrap();
    let w1 = mx.iter().find(|(b, _)| *b == moegen_dsl::abi::Buffer::W1).unwrap().1;
    assert_eq!(w1, (s.local_experts() * 2 * 128 * 256 / 2) as u64);
    let e = LayerWeights::sizes_for(&s, Arch::Sm90, WeightFormat::Nvfp4, ActivationFormat::Fp8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("NVFP4 weights") && e.contains("MXFP4"), "{e}");
    // Hopper MXFP4 with bf16 activations: one scale byte per 32 values, NVFP4 one per 16.
    let scales = |f| {
        LayerWeights::sizes(&s, Arch::Sm90, f)
            .unwrap()
            .into_iter()
            .find(|(b, _)| *b == moegen_dsl::abi::Buffer::W1Scales)
            .map(|(_, n)| n)
            .unwrap()
    };
    assert_eq!(scales(WeightFormat::Nvfp4), 2 * scales(WeightFormat::Mxfp4));
}
