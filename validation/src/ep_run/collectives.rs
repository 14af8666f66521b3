//! The three `Collective` operations on known bytes, checked against what the trait
//! promises: ep-check's first step, so that NCCL's all-gather, bf16 reduce-scatter and
//! grouped send/receive (the all-to-all mode (b) will use) are each seen on a device.

use half::bf16;
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::ep::{Collective, Exchange, NcclCollective};

use super::EpRunError;

const BLOCK: usize = 4096;

/// Byte `i` of rank `r`'s send buffer.
fn byte(r: usize, i: usize) -> u8 {
    (r * 131 + i * 7 + i / 251) as u8
}

/// bf16 element `j` of rank `r`'s send buffer: non-zero on one rank per element.
fn value(r: usize, j: usize, g: usize) -> bf16 {
    if j % g == r { bf16::from_f32(1.0 + (j % 97) as f32 / 64.0) } else { bf16::ZERO }
}

/// Runs each operation over the driven ranks; returns the operations whose result differs.
pub fn check_collectives(
    backends: &mut [CudaBackend],
    coll: &mut NcclCollective,
) -> Result<Vec<&'static str>, EpRunError> {
    let g = coll.world();
    let driven = coll.driven().to_vec();
    let mut bufs = Vec::new();
    for (&r, b) in driven.iter().zip(backends.iter_mut()) {
        let send: Vec<u8> = (0..g * BLOCK).map(|i| byte(r, i)).collect();
        bufs.push(Exchange { send: b.upload_new(&send)?, recv: b.alloc(g * BLOCK)? });
    }
    let mut failed = Vec::new();
    {
        let mut bs: Vec<&mut dyn Backend> =
            backends.iter_mut().map(|b| b as &mut dyn Backend).collect();
        coll.all_gather(&mut bs, &bufs, BLOCK)?;
        let want: Vec<u8> = (0..g).flat_map(|p| (0..BLOCK).map(move |i| byte(p, i))).collect();
        for (b, x) in bs.iter_mut().zip(&bufs) {
            if b.download(x.recv, g * BLOCK)? != want {
                failed.push("all_gather");
                break;
            }
        }
        coll.all_to_all(&mut bs, &bufs, BLOCK)?;
        for ((&q, b), x) in driven.iter().zip(bs.iter_mut()).zip(&bufs) {
            let want: Vec<u8> =
                (0..g).flat_map(|p| (0..BLOCK).map(move |i| byte(p, q * BLOCK + i))).collect();
            if b.download(x.recv, g * BLOCK)? != want {
                failed.push("all_to_all");
                break;
            }
        }
        let elements = BLOCK / 2;
        for ((&r, b), x) in driven.iter().zip(bs.iter_mut()).zip(&bufs) {
            let v: Vec<u8> =
                (0..g * elements).flat_map(|j| value(r, j, g).to_bits().to_le_bytes()).collect();
            b.upload(x.send, &v)?;
        }
        coll.reduce_scatter_bf16(&mut bs, &bufs, elements)?;
        for ((&r, b), x) in driven.iter().zip(bs.iter_mut()).zip(&bufs) {
            let want: Vec<u8> = (r * elements..(r + 1) * elements)
                .flat_map(|j| value(j % g, j, g).to_bits().to_le_bytes())
                .collect();
            if b.download(x.recv, elements * 2)? != want {
                failed.push("reduce_scatter_bf16");
                break;
            }
        }
    }
    for (b, x) in backends.iter_mut().zip(&bufs) {
        b.free_all(&[x.send, x.recv])?;
    }
    Ok(failed)
}
