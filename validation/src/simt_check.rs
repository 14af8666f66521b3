//! The SIMT kernels (routing sort, NVFP4 quantization, deterministic finalize, expert
//! parallelism's dispatch pack, row gather and combine unpack) on a backend,
//! compared byte for byte with their CPU counterparts. `gpu-check` runs these on the GPU and
//! on a simulator of the same kernel flavour.

use crate::rng::Rng;
use half::bf16;
use moegen_dsl::abi::SimtTarget;
use moegen_dsl::abi::ep::{NO_ROUTE, Padding};
use moegen_dsl::plan::PlanError;
use moegen_dsl::{FinalizeMode, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::{
    DeviceOpError, device_finalize_reduce, device_moe_sort, device_moe_sort_padding,
    device_quantize,
};
use moegen_runtime::ep::{
    EpError, EpPartition, combine_unpack, device_ep_combine_unpack, device_ep_gather_rows,
    device_ep_pack, gather_rows, pack_routes,
};
use moegen_runtime::reference::{finalize, quantize_activations};
use moegen_runtime::routing::{ExpertWindow, moe_sort, moe_sort_padding};

/// One SIMT case's outcome.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SimtRow {
    /// What ran.
    pub case: String,
    /// The device's bytes equal the CPU's.
    pub device_equal: bool,
    /// The simulator's bytes equal the CPU's (`None`: too large to simulate here).
    pub sim_equal: Option<bool>,
}

/// One SIMT case.
#[derive(Clone, Copy, Debug)]
pub enum SimtCase {
    /// Routing sort: tokens, top_k, experts, local offset, local count, tile.
    Sort(usize, usize, usize, usize, usize, TileSize),
    /// Quantization: tokens, hidden.
    Quantize(usize, usize),
    /// Deterministic finalize: tokens, top_k, hidden.
    Finalize(usize, usize, usize),
    /// Expert parallelism's dispatch pack, then the gather of its send rows and the unpack
    /// of rows returned in the same slots: experts, ranks, top_k, tokens, hidden.
    EpExchange(usize, usize, usize, usize, usize),
}

/// The cases gpu-check runs, with whether each is small enough to also simulate.
pub const CASES: &[(SimtCase, bool)] = &[
    (SimtCase::Sort(1, 2, 8, 2, 4, TileSize::T128), true),
    (SimtCase::Sort(300, 2, 8, 4, 4, TileSize::T128), true),
    (SimtCase::Sort(513, 8, 64, 8, 8, TileSize::T256), true),
    (SimtCase::Sort(77, 4, 32, 0, 32, TileSize::T16), true),
    (SimtCase::Sort(4096, 8, 256, 0, 32, TileSize::T128), false),
    (SimtCase::Sort(16384, 8, 256, 32, 32, TileSize::T256), false),
    (SimtCase::Sort(16384, 8, 256, 0, 256, TileSize::T64), false),
    (SimtCase::Quantize(7, 256), true),
    (SimtCase::Quantize(1000, 7168), false),
    (SimtCase::Finalize(9, 4, 64), true),
    (SimtCase::Finalize(2048, 8, 7168), false),
    (SimtCase::EpExchange(16, 2, 4, 37, 64), true),
    (SimtCase::EpExchange(64, 4, 8, 300, 256), true),
    (SimtCase::EpExchange(256, 8, 8, 4096, 7168), false),
    (SimtCase::EpExchange(32, 8, 4, 2048, 2880), false),
];

/// A simulator running the kernel flavour `target`.
pub fn simulator_for(target: SimtTarget) -> SimBackend {
    match target {
        SimtTarget::Sm90a => SimBackend::hopper(),
        SimtTarget::Sm100f => SimBackend::new(),
    }
}

/// A SIMT case that could not run; every variant names the case.
#[derive(Debug, thiserror::Error)]
pub enum SimtCheckError {
    /// The case's expert window is invalid.
    #[error("{case}: {source}")]
    Window {
        /// The case's label.
        case: String,
        /// The window's error.
        source: PlanError,
    },
    /// Expert parallelism's partition or CPU pack refused the case.
    #[error("{case}: {source}")]
    Ep {
        /// The case's label.
        case: String,
        /// The partition's or pack's error.
        source: Box<EpError>,
    },
    /// The CPU counterpart refused the case's data.
    #[error("{case}: {source}")]
    Reference {
        /// The case's label.
        case: String,
        /// The reference's error.
        source: Box<RuntimeError>,
    },
    /// The kernel on the backend.
    #[error("{case}: {source}")]
    Device {
        /// The case's label.
        case: String,
        /// The device operation's error.
        source: Box<DeviceOpError>,
    },
}

/// The bytes a case produces on `b`, and the CPU's.
type Outputs = (Vec<u8>, Vec<u8>);

fn run_case(b: &mut dyn Backend, case: SimtCase) -> Result<Outputs, SimtCheckError> {
    let e = |x| SimtCheckError::Reference { case: label(case), source: Box::new(x) };
    let dev = |x| SimtCheckError::Device { case: label(case), source: Box::new(x) };
    match case {
        SimtCase::Sort(tokens, k, experts, offset, local, tile) => {
            let w = ExpertWindow::new(experts, offset, local, k)
                .map_err(|source| SimtCheckError::Window { case: label(case), source })?;
            let mut r = Rng(tokens as u64 * 31 + k as u64);
            // Distinct experts per token; a quarter of the tokens name the first local one.
            let mut ids: Vec<i32> = Vec::with_capacity(tokens * k);
            for _ in 0..tokens {
                let mut chosen: Vec<i32> = Vec::with_capacity(k);
                if r.next().is_multiple_of(4) {
                    chosen.push(offset as i32);
                }
                while chosen.len() < k {
                    let c = (r.next() % experts as u64) as i32;
                    if !chosen.contains(&c) {
                        chosen.push(c);
                    }
                }
                ids.extend(chosen);
            }
            let want = moe_sort(&ids, tokens, &w, tile).map_err(e)?;
            let got = device_moe_sort(b, &ids, tokens, &w, tile).map_err(dev)?;
            // Then the last token names its first expert again at its last slot, and the
            // middle token too (where k > 1): both sides must name the middle one.
            let (mut got_dup, mut want_dup) = (None, None);
            // The padding id in the middle token's last slot and the last token's first:
            // skipped under `Padding::Skip` (mode (b)'s owner), the middle one out of range
            // under `Padding::Refuse` (every other launch).
            let mut pad_ids = ids.clone();
            for i in [(tokens / 2) * k + k - 1, (tokens - 1) * k] {
                pad_ids[i] = NO_ROUTE;
            }
            let mut pad = Vec::new();
            for padding in [Padding::Skip, Padding::Refuse] {
                let want = moe_sort_padding(&pad_ids, tokens, &w, tile, padding);
                let got = match device_moe_sort_padding(b, &pad_ids, tokens, &w, tile, padding) {
                    Err(DeviceOpError::Input(x)) => Err(x),
                    Err(other) => return Err(dev(other)),
                    Ok(s) => Ok(s),
                };
                pad.push((got, want));
            }
            let (got_pad, want_pad): (Vec<_>, Vec<_>) = pad.into_iter().unzip();
            if k > 1 {
                let mut dup_ids = ids;
                for t in [tokens - 1, tokens / 2] {
                    dup_ids[t * k + k - 1] = dup_ids[t * k];
                }
                want_dup = moe_sort(&dup_ids, tokens, &w, tile).err();
                got_dup = match device_moe_sort(b, &dup_ids, tokens, &w, tile) {
                    Err(DeviceOpError::Input(x)) => Some(x),
                    Err(other) => return Err(dev(other)),
                    Ok(_) => None,
                };
            }
            let got = format!("{got:?} {got_dup:?} {got_pad:?}");
            Ok((got.into_bytes(), format!("{want:?} {want_dup:?} {want_pad:?}").into_bytes()))
        }
        SimtCase::Quantize(tokens, hidden) => {
            let mut r = Rng(hidden as u64 + 7);
            let mut x: Vec<bf16> = (0..tokens * hidden)
                .map(|i| {
                    bf16::from_f32(
                        ((r.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + i % 29) as f32,
                    )
                })
                .collect();
            for (i, v) in [0.0f32, -0.0, 0.25, 0.75, 5.0, -5.0, 1e-30, 448.0].iter().enumerate() {
                x[i] = bf16::from_f32(*v);
            }
            let g = 448.0 * 6.0 / 15.0;
            let want = quantize_activations(&x, tokens, hidden, g).map_err(e)?;
            let got = device_quantize(b, &x, tokens, hidden, g).map_err(dev)?;
            Ok((format!("{got:?}").into_bytes(), format!("{want:?}").into_bytes()))
        }
        SimtCase::Finalize(tokens, k, hidden) => {
            let mut r = Rng(tokens as u64 * 3 + 1);
            let e2p: Vec<i32> = (0..tokens * k)
                .map(|i| if r.next().is_multiple_of(5) { -1 } else { i as i32 })
                .collect();
            let contrib: Vec<f32> = (0..tokens * k * hidden)
                .map(|i| {
                    if e2p[i / hidden] < 0 {
                        0.0
                    } else {
                        bf16::from_f32((r.next() >> 40) as f32 / 1e6 - 8.0).to_f32()
                    }
                })
                .collect();
            let want =
                finalize(&contrib, tokens, k, hidden, FinalizeMode::Deterministic).map_err(e)?;
            let got = device_finalize_reduce(b, &contrib, &e2p, tokens, k, hidden).map_err(dev)?;
            let bytes = |v: &[bf16]| v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
            Ok((bytes(&got), bytes(&want)))
        }
        SimtCase::EpExchange(experts, ranks, k, tokens, hidden) => {
            let ep = |x| SimtCheckError::Ep { case: label(case), source: Box::new(x) };
            let p = EpPartition::new(experts, ranks, k).map_err(ep)?;
            let mut r = Rng(tokens as u64 * 7 + ranks as u64);
            // Distinct experts per token; a third of the tokens send every route to rank 0,
            // so its block fills while others' pad.
            let mut ids: Vec<i32> = Vec::with_capacity(tokens * k);
            for t in 0..tokens {
                let pool =
                    if t % 3 == 0 && p.local_experts() >= k { p.local_experts() } else { experts };
                let mut chosen: Vec<i32> = Vec::with_capacity(k);
                while chosen.len() < k {
                    let c = (r.next() % pool as u64) as i32;
                    if !chosen.contains(&c) {
                        chosen.push(c);
                    }
                }
                ids.extend(chosen);
            }
            let weights: Vec<f32> =
                (0..tokens * k).map(|_| (r.next() >> 40) as f32 / (1u64 << 24) as f32).collect();
            let per_peer = p.max_routes_to_rank(tokens);
            let want = pack_routes(&p, &ids, &weights, tokens, per_peer).map_err(ep)?;
            let got = device_ep_pack(b, &p, &ids, &weights, tokens, per_peer).map_err(ep)?;
            let x: Vec<bf16> = (0..tokens * hidden)
                .map(|_| bf16::from_f32((r.next() >> 40) as f32 / 1e6 - 8.0))
                .collect();
            let want_rows = gather_rows(&want.sent, &x, tokens, hidden, k).map_err(e)?;
            let got_rows =
                device_ep_gather_rows(b, &got.sent, &x, tokens, hidden, k).map_err(dev)?;
            // The owners' rows come back in the slots they went out in: the unpack puts
            // each at its expanded index over a buffer whose untouched rows must stay.
            let fill = bf16::from_f32(-3.5);
            let mut want_out = vec![fill; tokens * k * hidden];
            combine_unpack(&want.sent, &want_rows, tokens * k, hidden, &mut want_out).map_err(e)?;
            let mut got_out = vec![fill; tokens * k * hidden];
            device_ep_combine_unpack(b, &got.sent, &got_rows, hidden, &mut got_out).map_err(dev)?;
            let bytes = |v: &[bf16]| -> Vec<u8> {
                v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
            };
            let mut g = format!("{got:?}").into_bytes();
            g.extend(bytes(&got_rows));
            g.extend(bytes(&got_out));
            let mut w = format!("{want:?}").into_bytes();
            w.extend(bytes(&want_rows));
            w.extend(bytes(&want_out));
            Ok((g, w))
        }
    }
}

/// A label for a case.
pub fn label(case: SimtCase) -> String {
    match case {
        SimtCase::Sort(n, k, e, o, l, t) => {
            format!("moe_sort N={n} k={k} E={e} L={l}@{o} T={}", t.rows())
        }
        SimtCase::Quantize(n, h) => format!("quantize_nvfp4 {n}x{h}"),
        SimtCase::Finalize(n, k, h) => format!("finalize_reduce N={n} k={k} H={h}"),
        SimtCase::EpExchange(e, g, k, n, h) => {
            format!("ep_dispatch_pack+gather_rows+combine_unpack E={e} G={g} k={k} N={n} H={h}")
        }
    }
}

/// Runs `case` on `device` and, when `simulate`, on a simulator of the device's flavour.
pub fn check(
    device: &mut dyn Backend,
    case: SimtCase,
    simulate: bool,
) -> Result<SimtRow, SimtCheckError> {
    let (got, want) = run_case(device, case)?;
    let sim_equal = if simulate {
        let mut sim = simulator_for(device.simt_target());
        let (s, w) = run_case(&mut sim, case)?;
        Some(s == w)
    } else {
        None
    };
    Ok(SimtRow { case: label(case), device_equal: got == want, sim_equal })
}
