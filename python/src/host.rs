//! The simulator's pass: host arrays into the simulator's memory and back, and the
//! conversions of host arrays into the element types the kernels read.

use moegen_runtime::prelude::*;

use crate::arrays::HostArray;
use crate::errors::{Error, Result};

/// `x` as bf16: `bfloat16` (or its bits as `uint16`) as is; `float32` rounded to the
/// nearest bf16, ties to even (`half::bf16::from_f32`, moegen's own conversion).
pub(crate) fn bf16s(x: &HostArray) -> Result<Vec<bf16>> {
    match x.dtype.as_str() {
        "bfloat16" | "uint16" => Ok(x
            .data
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect()),
        "float32" => Ok(x.f32s().into_iter().map(bf16::from_f32).collect()),
        other => Err(Error::Dtype {
            input: x.name.clone(),
            actual: other.to_string(),
            expected: "bfloat16, uint16 (bf16 bits) or float32 (rounded to bf16)",
        }),
    }
}

/// Expert ids as the kernels read them, i32: `int32` as is, `int64` checked to fit (a
/// narrowing cast would wrap an id onto a valid expert).
pub(crate) fn ids(ids: &HostArray, top_k: usize) -> Result<Vec<i32>> {
    match ids.dtype.as_str() {
        "int32" => Ok(ids
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()),
        "int64" => ids
            .data
            .chunks_exact(8)
            .enumerate()
            .map(|(j, c)| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                let id = i64::from_le_bytes(b);
                i32::try_from(id).map_err(|_| Error::Value {
                    input: "token_selected_experts",
                    reason: format!(
                        "token {} slot {}: id {id} does not fit in int32",
                        j / top_k.max(1),
                        j % top_k.max(1)
                    ),
                })
            })
            .collect(),
        other => Err(Error::Dtype {
            input: ids.name.clone(),
            actual: other.to_string(),
            expected: "int32 or int64",
        }),
    }
}

/// Little-endian bytes of bf16 values.
pub(crate) fn bf16_bytes(v: &[bf16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

/// Runs `layer` over host data on the simulator backend `b`
/// (`MoeLayer::forward_host`: the routing kernels' device-side checks are decoded after the
/// pass, since the output is read back anyway).
pub(crate) fn forward(
    b: &mut dyn Backend,
    layer: &MoeLayer,
    ws: &Workspace,
    tokens: usize,
    (x, ids, weights): (&[bf16], &[i32], &[f32]),
) -> Result<Vec<bf16>> {
    Ok(layer.forward_host(b, ws, tokens, x, ids, weights)?)
}
