//! One pass of a layer over host data: upload the inputs, run, decode the routing kernels'
//! device-side checks, read the output back, and free the pass's buffers whether it ran or
//! not. What a host-memory front end needs (moegen-candle's CPU device, the Python
//! package's NumPy path, tests), written once.

use half::bf16;

use super::error::LayerError;
use super::forward::{ForwardIo, MoeLayer};
use super::host_buffers::HostBuffers;
use super::memory::{DeviceSlice, Workspace};
use crate::backend::{Backend, DevicePtr};
use crate::routing::check_user_expert_ids;

impl MoeLayer {
    /// `tokens` tokens of `x` (bf16 `[tokens, H]`), `ids` (i32 `[tokens, top_k]`) and
    /// `weights` (f32 `[tokens, top_k]`) through the layer on `b`, returning the bf16 output
    /// `[tokens, H]`. Expert ids outside `[0, experts)` are refused before any upload, the
    /// padding id `NO_ROUTE` included. [`Self::forward`] checks the sizes against the layer and the workspace;
    /// the routing kernels' records are decoded (`check_errors`) before the output is read,
    /// since a host caller reads it back anyway.
    pub fn forward_host(
        &self,
        b: &mut dyn Backend,
        ws: &Workspace,
        tokens: usize,
        x: &[bf16],
        ids: &[i32],
        weights: &[f32],
    ) -> Result<Vec<bf16>, LayerError> {
        let hidden = self.config().shape.hidden;
        let window = &self.config().shape.window;
        // The device sort skips the padding id for expert parallelism's sake; a caller's ids
        // must not use it, and here they are on the host to check.
        if tokens.checked_mul(window.top_k()) == Some(ids.len()) {
            check_user_expert_ids(ids, window.top_k(), window.num_experts())?;
        }
        let mut held = Vec::with_capacity(4);
        let ran = self.run_host(b, ws, tokens, hidden, (x, ids, weights), &mut held);
        let freed = b.free_all(&held);
        let out = ran?;
        freed?;
        Ok(out)
    }

    fn run_host(
        &self,
        b: &mut dyn Backend,
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
        // Saturating: a product past usize is refused by the allocation's own size check.
        let output_len = tokens.saturating_mul(hidden);
        let io = ForwardIo {
            tokens,
            activations: keep(b.upload_slice(x)?),
            expert_ids: keep(b.upload_slice(ids)?),
            expert_weights: keep(b.upload_slice(weights)?),
            output: keep(b.alloc_slice::<bf16>(output_len)?),
        };
        self.forward(b, ws, &io)?;
        self.check_errors(b, ws)?;
        b.download_slice::<bf16>(io.output)
    }
}
