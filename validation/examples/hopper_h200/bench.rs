//! Timing of one tactic's GEMMs on random NVFP4 weights (bf16 activations), no reference.

use half::bf16;
use moegen_dsl::abi::{Buffer, KernelId, MapDims, Scalar};
use moegen_dsl::plan::ExpertWindow;
use moegen_dsl::{
    ActivationFormat, FinalizeMode, GemmKind, GemmTactic, KernelDescBuilder, Target, TileSize,
};
use moegen_runtime::backend::Backend;
use moegen_runtime::device_ops::find_kernel;
use moegen_runtime::launch::{Bindings, GridInputs, kernel_args, launch_shape};
use moegen_runtime::routing::moe_sort;

use super::problem::{Rng, bytes_bf16, bytes_f32, bytes_i32, bytes_u32};

/// `[H, I, E, L, k, tokens, T, N1, N2]`: mean time of 20 launches after 3, and the weight
/// bytes of the live tiles' experts per second.
pub fn bench(b: &mut dyn Backend, spec: [usize; 9]) -> Result<(), String> {
    let e = |x: moegen_runtime::backend::BackendError| x.to_string();
    let [h, i, ne, l, k, tokens, t, n1, n2] = spec;
    let window = ExpertWindow::new(ne, 0, l, k).map_err(|e| e.to_string())?;
    let mut r = Rng(5);
    let mut ids = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let mut row: Vec<i32> = Vec::with_capacity(k);
        while row.len() < k {
            let c = r.below(ne as u64) as i32;
            if !row.contains(&c) {
                row.push(c);
            }
        }
        ids.extend(row);
    }
    let tile = TileSize::from_rows(t as u32).map_err(|e| e.to_string())?;
    let sort = moe_sort(&ids, tokens, &window, tile).map_err(|e| e.to_string())?;
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let mut rand = |n: usize| (0..n).map(|_| r.below(256) as u8).collect::<Vec<u8>>();
    let (w1v, w2v) = (rand(l * i * h), rand(l * h * i / 2));
    let x: Vec<bf16> = (0..tokens * h).map(|j| bf16::from_f32((j % 7) as f32 - 3.0)).collect();
    let mut up = |v: &[u8]| b.upload_new(v).map_err(e);
    let (w1, w2) = (up(&w1v)?, up(&w2v)?);
    let (s1, s2) = (up(&vec![0x30; l * i * h / 8])?, up(&vec![0x30; l * h * i / 16])?);
    let alpha = up(&bytes_f32(&vec![1e-3; l]))?;
    let fc2 = up(&1f32.to_le_bytes())?;
    let px = up(&bytes_bf16(&x))?;
    let hbuf = up(&vec![0u8; rows * i * 2])?;
    let out = up(&vec![0u8; tokens * h * 2])?;
    let bind = Bindings::new()
        .buffer(Buffer::TileIdxToExpertIdx, up(&bytes_i32(&sort.tile_idx_to_expert_idx))?)
        .buffer(Buffer::TileIdxToMnLimit, up(&bytes_i32(&sort.tile_idx_to_mn_limit))?)
        .buffer(
            Buffer::PermutedIdxToExpandedIdx,
            up(&bytes_i32(&sort.permuted_idx_to_expanded_idx))?,
        )
        .buffer(Buffer::NumNonExitingTiles, up(&bytes_u32(&[sort.num_non_exiting_tiles as u32]))?)
        .buffer(Buffer::RouterWeights, up(&bytes_f32(&vec![0.1; tokens * k]))?)
        .buffer(Buffer::W1, w1)
        .buffer(Buffer::W1Scales, s1)
        .buffer(Buffer::W2, w2)
        .buffer(Buffer::W2Scales, s2)
        .buffer(Buffer::Alpha1, alpha)
        .buffer(Buffer::Alpha2, alpha)
        .buffer(Buffer::Fc2InputScale, fc2)
        .buffer(Buffer::ActivationsBf16, px)
        .buffer(Buffer::Gemm1OutputBf16, hbuf)
        .buffer(Buffer::Output, out)
        .scalar(Scalar::Hidden, h as u64)
        .and_then(|x| x.scalar(Scalar::Intermediate, i as u64))
        .and_then(|x| x.scalar(Scalar::TopK, k as u64))
        .and_then(|x| x.scalar(Scalar::MaxTiles, sort.max_tiles() as u64))
        .map_err(|e| e.to_string())?
        .map_dims(MapDims {
            hidden: h as u64,
            intermediate: i as u64,
            local_experts: l as u64,
            permuted_rows: rows as u64,
        });
    let grid = GridInputs {
        hidden: h as u64,
        intermediate: i as u64,
        max_tiles: sort.max_tiles() as u64,
        sm_count: b.sm_count(),
        ..Default::default()
    };
    let live = sort.num_non_exiting_tiles as usize;
    for (kind, n) in [(GemmKind::Gemm1, n1), (GemmKind::Gemm2, n2)] {
        let g = GemmTactic::new_sm90(kind, t as u32, n as u32).map_err(|e| e.to_string())?;
        let mut d =
            KernelDescBuilder::new(g).target(Target::Sm90a).activations(ActivationFormat::Bf16);
        if kind == GemmKind::Gemm2 {
            d = d.finalize(FinalizeMode::BulkReduceAdd);
        }
        let key = d.build().map_err(|e| e.to_string())?.key();
        let kinfo = find_kernel(&KernelId::Gemm(key)).map_err(|e| e.to_string())?;
        let args = kernel_args(b, kinfo, &bind).map_err(|e| e.to_string())?;
        let shape = launch_shape(kinfo, &grid).map_err(|e| e.to_string())?;
        for _ in 0..3 {
            b.launch(kinfo, shape, &args).map_err(e)?;
        }
        let t0 = b.record_event().map_err(e)?;
        for _ in 0..20 {
            b.launch(kinfo, shape, &args).map_err(e)?;
        }
        let t1 = b.record_event().map_err(e)?;
        let ms = f64::from(b.elapsed_ms(t0, t1).map_err(e)?) / 20.0;
        let bytes = match kind {
            GemmKind::Gemm1 => live * (i * h + i * h / 8),
            GemmKind::Gemm2 => live * (h * i / 2 + h * i / 16),
        };
        println!(
            "  {}: {:.1} µs over {live} tiles, grid {}, weights {:.0} GB/s",
            kinfo.name,
            ms * 1e3,
            shape.grid,
            bytes as f64 / (ms * 1e-3) / 1e9
        );
    }
    Ok(())
}
