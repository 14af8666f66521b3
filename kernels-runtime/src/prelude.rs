//! Everything a layer needs, in one `use moegen_runtime::prelude::*;`: the layer API and the
//! vocabulary its signatures speak ([`crate::layer`]), the backends the enabled features
//! build, the typed host-buffer helpers, and the host-side weight preparation and
//! calibration scales (the README's "From zero to a layer").

pub use crate::backend::{Backend, DevicePtr};
pub use crate::layer::*;
pub use crate::reference::{
    PreparedWeights, ReferenceOptions, Routing, Sm100MxWeights, import_mxfp4, import_nvfp4,
    moe_reference, moe_reference_sm100_mx, prepare_weights, quantize_activations,
    quantize_mxfp8_activations,
};
pub use half::bf16;
pub use moegen_dsl::formats::{block_amax, nvfp4_global_scale};

#[cfg(feature = "cuda")]
pub use crate::backend::cuda::CudaBackend;
#[cfg(feature = "sim")]
pub use crate::backend::sim::SimBackend;
