//! A layer `MoeLayer::try_new` refuses gives its weights back: the caller can release them
//! (nothing of theirs stays allocated) or build another layer on them.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, Arch};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::*;
use moegen_runtime::reference::prepare_weights;
use moegen_runtime::routing::ExpertWindow;

const MAX_TOKENS: u64 = 8;

fn table(b: &SimBackend, config: &LayerConfig) -> DispatchTable {
    let kernels = KernelSet::builtin();
    let tactics =
        MoeLayer::candidates(config, &kernels, MAX_TOKENS, Arch::Sm100, WeightFormat::Nvfp4)
            .unwrap();
    let dev = DeviceModel::b200().with_sms(b.sm_count());
    DispatchTable::analytic(&config.shape, MAX_TOKENS, &tactics, &dev).unwrap()
}

#[test]
fn a_refused_layer_hands_its_weights_back() {
    let mut b = SimBackend::new().with_sm_count(4);
    let shape = MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let (h, i, l) = (512, 256, 4);
    let v = |n: usize, k: f32| (0..n).map(|j| ((j * 7 % 13) as f32 - 6.0) * k).collect::<Vec<_>>();
    let prepared = prepare_weights(
        &shape,
        &v(l * i * h, 0.01),
        &v(l * i * h, 0.02),
        &v(l * h * i, 0.01),
        1.0,
        336.0,
    )
    .unwrap();
    let before = b.stats();
    let weights = LayerWeights::upload(&mut b, &shape, &prepared, 1.0).unwrap();
    let uploaded = b.stats().allocations - before.allocations;
    assert!(uploaded > 0);
    let kernels = KernelSet::builtin();

    // Configured for MXFP8 activations, the NVFP4-activation weights are refused by name,
    // and come back.
    let mx = LayerConfig { activations: ActivationFormat::Mxfp8, ..LayerConfig::new(shape) };
    let plain = LayerConfig::new(shape);
    let refused = match MoeLayer::try_new(&b, mx, weights, &kernels, table(&b, &plain)) {
        Err(r) => r,
        Ok(_) => panic!("a layer for other activations was built"),
    };
    assert!(matches!(refused.error, LayerError::WorkspaceMismatch { .. }), "{}", refused.error);
    assert!(refused.to_string().contains("activations"), "{refused}");

    // The same weights build the layer they were prepared for, which releases them.
    let layer = MoeLayer::try_new(&b, plain, refused.weights, &kernels, table(&b, &plain))
        .unwrap_or_else(|r| panic!("{r}"));
    let frees = b.stats().frees;
    layer.release(&mut b).unwrap();
    assert_eq!(b.stats().frees - frees, uploaded, "every uploaded buffer freed");

    // Refused again and released directly: nothing of the weights stays allocated.
    let weights = LayerWeights::upload(&mut b, &shape, &prepared, 1.0).unwrap();
    let Err(refused) = MoeLayer::try_new(&b, mx, weights, &kernels, table(&b, &plain)) else {
        panic!("a layer for other activations was built");
    };
    let frees = b.stats().frees;
    refused.weights.release(&mut b).unwrap();
    assert_eq!(b.stats().frees - frees, uploaded);
}
