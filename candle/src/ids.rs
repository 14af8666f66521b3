//! Expert ids as the kernels read them: I32.

use candle_core::{DType, Tensor};

use crate::block::candle;
use crate::error::MoeBlockError;

/// `topk_ids` `[tokens, k]` as contiguous I32 on its device. I32 is taken as is; U32 and
/// I64 ids are read to the host once to refuse one that does not fit in i32 (a narrowing
/// cast would wrap it onto a valid id), then uploaded as I32 from there: candle's CUDA
/// device has no cast to or from I32 (candle-kernels 0.11), so a device cast fails with
/// "named symbol not found" (found on the H200, 2026-12-03). Ids out of the layer's range
/// are the routing kernels' check (`MoeBlock::check_errors`), as for any caller.
pub(crate) fn to_i32(ids: &Tensor) -> Result<Tensor, MoeBlockError> {
    match ids.dtype() {
        DType::I32 => ids.contiguous().map_err(candle),
        DType::U32 | DType::I64 => {
            let wide = ids.to_dtype(DType::I64).map_err(candle)?;
            let rows: Vec<Vec<i64>> = wide.to_vec2().map_err(candle)?;
            let mut narrow = Vec::with_capacity(ids.elem_count());
            for (token, row) in rows.iter().enumerate() {
                for (slot, &id) in row.iter().enumerate() {
                    let id = i32::try_from(id).map_err(|_| MoeBlockError::IdRange {
                        token,
                        slot,
                        id,
                    })?;
                    narrow.push(id);
                }
            }
            Tensor::from_vec(narrow, ids.shape(), ids.device()).map_err(candle)
        }
        other => Err(MoeBlockError::Dtype {
            input: "topk_ids",
            actual: other,
            expected: "I32, U32 or I64",
        }),
    }
}
