//! The SM100 MXFP8 × MXFP4 layer through `MoeLayer` in the simulator, with the kernels of the
//! built-in set (`quantize_mxfp8`, the plain-SwiGLU `kind::mxf8f6f4` GEMMs): every tactic
//! the layer resolves, bit for bit against `moe_reference_sm100_mx`, near the f64 oracle;
//! and the refusals of a format mismatch between weights, workspace and layer.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, Arch, FinalizeMode, TileSize};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::*;
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{LayerCase, RoutePattern, check_tactics_in, problem};

fn case(tokens: usize, finalize: FinalizeMode, seed: u64) -> LayerCase {
    // K tails in both GEMMs (320 and 192 are not multiples of the 128-wide K stage) and N
    // tails at N 256.
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    LayerCase::new(
        shape,
        tokens,
        ActivationFormat::Mxfp8,
        WeightFormat::Mxfp4,
        finalize,
        seed,
        RoutePattern::Spread,
    )
}

#[test]
fn every_resolved_tactic_is_bit_exact() {
    for (tokens, finalize) in [(7, FinalizeMode::BulkReduceAdd), (70, FinalizeMode::Deterministic)]
    {
        let p = problem(case(tokens, finalize, 5 + tokens as u64)).unwrap();
        let mut sim = SimBackend::new().with_sm_count(8);
        let rows = check_tactics_in(&mut sim, &p, None, &KernelSet::builtin()).unwrap();
        assert_eq!(rows.len(), moegen_dsl::tactics_for(Arch::Sm100).len(), "{rows:?}");
        for r in &rows {
            assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
            // The oracle multiplies the unquantized Gaussian weights: their MXFP4 rounding
            // (eight magnitudes per power of two) dominates, about 18 % here; E4M3
            // activations and h add about 3 % (the checkpoint test, whose oracle decodes
            // the MXFP4 weights exactly, bounds the latter alone).
            assert!(r.reference_vs_oracle < 0.25, "{}: {}", r.tactic, r.reference_vs_oracle);
        }
    }
}

#[test]
fn formats_must_agree_between_weights_workspace_and_layer() {
    let p = problem(case(5, FinalizeMode::BulkReduceAdd, 9)).unwrap();
    let c = p.case;
    let mut sim = SimBackend::new();
    let kernels = KernelSet::builtin();
    let mx = LayerConfig { activations: ActivationFormat::Mxfp8, ..LayerConfig::new(c.shape) };
    let tactics = MoeLayer::candidates(&mx, &kernels, 8, Arch::Sm100, WeightFormat::Mxfp4).unwrap();
    let table = DispatchTable::analytic(&c.shape, 8, &tactics, &DeviceModel::b200()).unwrap();
    // NVFP4 weights for an MXFP8 layer.
    let nv = LayerWeights::upload(&mut sim, &c.shape, &p.prepared, p.input_scale).unwrap();
    let err = MoeLayer::new(&sim, mx, nv, &kernels, table.clone()).unwrap_err();
    assert!(err.to_string().contains("prepared for Nvfp4 activations"), "{err}");
    // A workspace planned for NVFP4 under an MXFP8 layer.
    let w =
        LayerWeights::upload_sm100_mx(&mut sim, &c.shape, &p.sm100_mx_weights().unwrap()).unwrap();
    let layer = MoeLayer::new(&sim, mx, w, &kernels, table).unwrap();
    let spec = |activations| WorkspaceSpec {
        max_tokens: 8,
        top_k: 2,
        max_local_experts: 4,
        max_hidden: 320,
        max_intermediate: 192,
        tile_sizes: TileSize::SM100.to_vec(),
        deterministic: false,
        arch: Arch::Sm100,
        activations,
    };
    let ws = Workspace::new(&mut sim, &kernels, spec(ActivationFormat::Nvfp4)).unwrap();
    let x = sim.alloc(5 * 320 * 2).unwrap();
    let ids = sim.upload_new(&[0u8; 5 * 2 * 4]).unwrap();
    let wts = sim.upload_new(&[0u8; 5 * 2 * 4]).unwrap();
    let out = sim.alloc(5 * 320 * 2).unwrap();
    let io = ForwardIo {
        tokens: 5,
        activations: DeviceSlice::new(x, 5 * 320 * 2),
        expert_ids: DeviceSlice::new(ids, 40),
        expert_weights: DeviceSlice::new(wts, 40),
        output: DeviceSlice::new(out, 5 * 320 * 2),
    };
    let err = layer.forward(&mut sim, &ws, &io).unwrap_err();
    assert!(err.to_string().contains("planned for Nvfp4 activations"), "{err}");
    // MXFP8 on Hopper is refused when planned.
    let hopper = WorkspaceSpec { arch: Arch::Sm90, ..spec(ActivationFormat::Mxfp8) };
    let e = Workspace::plan_for(&hopper).unwrap_err();
    assert!(e.to_string().contains("Sm90 layers do not take Mxfp8 activations"), "{e}");
    let a16 =
        WorkspaceSpec { activations: ActivationFormat::Bf16, ..spec(ActivationFormat::Mxfp8) };
    let e = Workspace::plan_for(&a16).unwrap_err();
    assert!(e.to_string().contains("Sm100 layers do not take Bf16 activations"), "{e}");
    // A set without MXFP8 GEMMs cannot serve an MXFP8 workspace: refused when made.
    let nvfp4_only =
        KernelSet::new(kernels.kernels().iter().copied().filter(|k| !k.name.contains("_mxa8")));
    let e = Workspace::new(&mut sim, &nvfp4_only, spec(ActivationFormat::Mxfp8)).unwrap_err();
    assert!(e.to_string().contains("no Sm100 tactic for Mxfp8 activations"), "{e}");
    // The B200 model for these kernels runs the MMAs at half the NVFP4 rate.
    let (nv, mx) =
        (DeviceModel::b200(), DeviceModel::for_layer(Arch::Sm100, ActivationFormat::Mxfp8));
    assert_eq!(mx.gpu.macs_per_clock_per_sm * 2.0, nv.gpu.macs_per_clock_per_sm);
    assert_eq!(mx.activations, ActivationFormat::Mxfp8);
}
