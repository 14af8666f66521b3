//! The CPU device's pass: candle's host tensors into the simulator's memory and back.

use candle_core::{Device, Tensor};
use moegen_runtime::prelude::*;

use crate::block::candle;
use crate::error::MoeBlockError;

/// Runs `layer` over host tensors on the simulator backend `b`; the routing kernels'
/// device-side checks are decoded after the pass, since the output is read back anyway.
pub(crate) fn forward(
    b: &mut dyn Backend,
    layer: &MoeLayer,
    ws: &Workspace,
    xs: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    tokens: usize,
) -> Result<Tensor, MoeBlockError> {
    let hidden = xs.dims().last().copied().unwrap_or(0);
    let x: Vec<bf16> = xs.flatten_all().and_then(|t| t.to_vec1()).map_err(candle)?;
    let ids: Vec<i32> = ids.flatten_all().and_then(|t| t.to_vec1()).map_err(candle)?;
    let weights: Vec<f32> = weights.flatten_all().and_then(|t| t.to_vec1()).map_err(candle)?;
    let out = layer.forward_host(b, ws, tokens, &x, &ids, &weights)?;
    Tensor::from_vec(out, (tokens, hidden), &Device::Cpu).map_err(candle)
}
