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
    let mut held = Vec::with_capacity(4);
    let ran = run(b, layer, ws, tokens, hidden, (&x, &ids, &weights), &mut held);
    // The pass's buffers go back whether it ran or not.
    let freed = b.free_all(&held);
    let out = ran?;
    freed.map_err(LayerError::from)?;
    Tensor::from_vec(out, (tokens, hidden), &Device::Cpu).map_err(candle)
}

fn run(
    b: &mut dyn Backend,
    layer: &MoeLayer,
    ws: &Workspace,
    tokens: usize,
    hidden: usize,
    (x, ids, weights): (&[bf16], &[i32], &[f32]),
    held: &mut Vec<DevicePtr>,
) -> Result<Vec<bf16>, LayerError> {
    let mut keep = |s: DeviceSlice| {
        held.push(s.ptr);
        s
    };
    let io = ForwardIo {
        tokens,
        activations: keep(b.upload_slice(x)?),
        expert_ids: keep(b.upload_slice(ids)?),
        expert_weights: keep(b.upload_slice(weights)?),
        output: keep(b.alloc_slice::<bf16>(tokens * hidden)?),
    };
    layer.forward(b, ws, &io)?;
    layer.check_errors(b, ws)?;
    b.download_slice::<bf16>(io.output)
}
