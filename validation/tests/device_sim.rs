//! The generated SIMT kernels, run in moegen-sim through the backend interface, against the
//! CPU reference: bit-identical outputs.

use half::bf16;
use moegen_dsl::{FinalizeMode, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::{
    DeviceOpError, device_finalize_reduce, device_moe_sort, device_quantize,
};
use moegen_runtime::reference::{finalize, quantize_activations};
use moegen_runtime::routing::{ExpertWindow, moe_sort};

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

/// Distinct experts per token; with `skew`, a third of the tokens name expert 3.
fn routing(tokens: usize, k: usize, experts: usize, seed: u64, skew: bool) -> Vec<i32> {
    let mut r = Rng(seed);
    let mut ids = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let mut chosen: Vec<i32> = Vec::with_capacity(k);
        if skew && r.next().is_multiple_of(3) {
            chosen.push(3);
        }
        while chosen.len() < k {
            let c = (r.next() % experts as u64) as i32;
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
        ids.extend(chosen);
    }
    ids
}

#[test]
fn routing_sort_matches_the_cpu_sort_bit_for_bit() {
    let cases = [
        (1, 2, 8, 2, 4, TileSize::T128, false),
        (5, 2, 8, 2, 4, TileSize::T256, false),
        (300, 2, 8, 4, 4, TileSize::T128, true),
        (700, 4, 16, 0, 16, TileSize::T128, true),
        (513, 8, 64, 8, 8, TileSize::T256, false),
        // Ten histogram blocks (the offsets pass loads 8 blocks' counts at a time) and 40
        // local experts (the tile scan takes 32 experts at a time).
        (2500, 4, 64, 12, 40, TileSize::T128, true),
        // One block, 64 and 40 local experts: two groups of the warp's scan, the second
        // whole or partial.
        (200, 4, 64, 0, 64, TileSize::T128, false),
        (200, 4, 64, 0, 40, TileSize::T128, false),
    ];
    for (i, &(tokens, k, experts, offset, local, tile, skew)) in cases.iter().enumerate() {
        let w = ExpertWindow::new(experts, offset, local, k).unwrap();
        let ids = routing(tokens, k, experts, 17 + i as u64, skew);
        let want = moe_sort(&ids, tokens, &w, tile).unwrap();
        let mut sim = SimBackend::new();
        let got = device_moe_sort(&mut sim, &ids, tokens, &w, tile).unwrap();
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn routing_sort_edge_cases() {
    let w = ExpertWindow::new(8, 4, 4, 1).unwrap();
    for ids in [vec![5; 300], vec![0, 1, 2, 3], vec![4, 7]] {
        let n = ids.len();
        let mut sim = SimBackend::new();
        assert_eq!(
            device_moe_sort(&mut sim, &ids, n, &w, TileSize::T128).unwrap(),
            moe_sort(&ids, n, &w, TileSize::T128).unwrap()
        );
    }
    // Out-of-range ids are flagged by the kernels, never written out of bounds.
    let mut sim = SimBackend::new();
    assert_eq!(
        device_moe_sort(&mut sim, &[1, 9, -3], 3, &w, TileSize::T128),
        Err(DeviceOpError::Input(RuntimeError::ExpertOutOfRange {
            token: 1,
            slot: 0,
            expert: 9,
            experts: 8
        }))
    );
}

/// A token naming one expert at two slots is recorded by the kernels and decoded into the
/// host sort's error: the first such route in expanded order, wherever its block runs, and
/// the earliest slot with the same id.
#[test]
fn duplicate_experts_are_recorded_as_the_host_names_them() {
    let (tokens, k, experts) = (700, 4, 16);
    let w = ExpertWindow::new(experts, 4, 8, k).unwrap();
    let good = routing(tokens, k, experts, 3, true);
    // A duplicate in the second histogram block (route 1030: token 257, slots 0 and 2, and 3
    // too), then one more in the first block (route 14), which must win. With 200 tokens
    // (800 routes) the one-block sort runs: route 530 and then 14.
    let dups: [(usize, &[(usize, usize)]); 4] = [
        (tokens, &[(1030, 1028)]),
        (tokens, &[(1030, 1028), (14, 12)]),
        (200, &[(530, 528)]),
        (200, &[(530, 528), (14, 12)]),
    ];
    for (tokens, set) in dups {
        let good = &good[..tokens * k];
        let mut ids = good.to_vec();
        for &(route, from) in set {
            ids[route] = ids[from];
            ids[route + 1] = ids[from];
        }
        let &(route, from) = set.last().unwrap();
        let mut sim = SimBackend::new();
        let got = device_moe_sort(&mut sim, &ids, tokens, &w, TileSize::T128).err();
        let want = moe_sort(&ids, tokens, &w, TileSize::T128).err().unwrap();
        assert_eq!(
            want,
            RuntimeError::DuplicateExpert {
                token: route / k,
                slot: route % k,
                earlier_slot: from % k,
                expert: i64::from(ids[from]),
            }
        );
        assert_eq!(got, Some(DeviceOpError::Input(want)), "route {route}");
    }
    // Three slots with one id: the second names the first.
    let mut ids = good.clone();
    ids[4 * 5 + 1] = ids[4 * 5 + 3];
    ids[4 * 5 + 2] = ids[4 * 5 + 3];
    let mut sim = SimBackend::new();
    assert_eq!(
        device_moe_sort(&mut sim, &ids, tokens, &w, TileSize::T128).err(),
        Some(DeviceOpError::Input(RuntimeError::DuplicateExpert {
            token: 5,
            slot: 2,
            earlier_slot: 1,
            expert: i64::from(ids[4 * 5 + 3]),
        }))
    );
}

#[test]
fn quantize_matches_the_cpu_quantizer_bit_for_bit() {
    let (tokens, hidden) = (7, 256);
    let mut r = Rng(5);
    let mut x: Vec<bf16> = (0..tokens * hidden)
        .map(|i| {
            bf16::from_f32(
                ((r.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + i % 13) as f32,
            )
        })
        .collect();
    // Exact ties, zeros, tiny values and a block far below the scale's range.
    x[0] = bf16::from_f32(0.0);
    x[1] = bf16::from_f32(-0.0);
    x[2] = bf16::from_f32(0.25);
    for v in &mut x[16..32] {
        *v = bf16::from_f32(1e-30);
    }
    let g = 448.0 * 6.0 / 7.0;
    let want = quantize_activations(&x, tokens, hidden, g).unwrap();
    let mut sim = SimBackend::new();
    let got = device_quantize(&mut sim, &x, tokens, hidden, g).unwrap();
    assert_eq!(got, want);
    assert!(sim.thread_instructions > 0);
}

#[test]
fn deterministic_finalize_matches_the_cpu_finalize() {
    let (tokens, k, hidden) = (9, 4, 64);
    let mut r = Rng(11);
    let e2p: Vec<i32> =
        (0..tokens * k).map(|i| if r.next().is_multiple_of(4) { -1 } else { i as i32 }).collect();
    let contrib: Vec<f32> = (0..tokens * k * hidden)
        .map(|i| {
            let route = i / hidden;
            if e2p[route] < 0 {
                0.0
            } else {
                bf16::from_f32((r.next() >> 40) as f32 / 1e6 - 8.0).to_f32()
            }
        })
        .collect();
    let want = finalize(&contrib, tokens, k, hidden, FinalizeMode::Deterministic).unwrap();
    let mut sim = SimBackend::new();
    let got = device_finalize_reduce(&mut sim, &contrib, &e2p, tokens, k, hidden).unwrap();
    assert_eq!(got, want);
}

/// A generated kernel's text with one planted defect.
fn mutated(name: &str, from: &str, to: &str) -> String {
    let ptx = moegen_kernels::kernel(name).unwrap().ptx;
    assert!(ptx.contains(from), "{name} has no `{from}` to mutate");
    ptx.replacen(from, to, 1)
}

#[test]
fn planted_defects_in_the_simt_kernels_are_caught() {
    let w = ExpertWindow::new(8, 2, 4, 2).unwrap();
    // 1200 routes: two blocks, so the three-pass sort runs.
    let ids = routing(600, 2, 8, 3, true);
    let want = moe_sort(&ids, 600, &w, TileSize::T128).unwrap();
    // Off-by-one in the tile's valid-row limit: the offsets kernel computes min((t+1)·T, end).
    let mut sim = SimBackend::new();
    let ptx = moegen_kernels::kernel("moegen_sm100_moe_sort_offsets").unwrap().ptx;
    let line = ptx.lines().find(|l| l.contains("min.u32")).unwrap();
    let regs: Vec<&str> =
        line.trim().trim_end_matches(';').split([' ', ',']).filter(|s| !s.is_empty()).collect();
    let bad = format!("\tadd.u32 {}, {}, 1;", regs[1], regs[2]);
    sim.replace_kernel(
        "moegen_sm100_moe_sort_offsets",
        &ptx.replacen(line, &format!("{line}\n{bad}"), 1),
    )
    .unwrap();
    assert_ne!(device_moe_sort(&mut sim, &ids, 600, &w, TileSize::T128).ok(), Some(want.clone()));
    // The rank within a chunk counts routes of another expert: two routes share a row. That
    // compare is the first `setp.eq.u32` after the barrier (those before it belong to the
    // error record).
    let mut sim = SimBackend::new();
    let ptx = moegen_kernels::kernel("moegen_sm100_moe_sort_scatter").unwrap().ptx;
    let barrier = ptx.find("bar.sync").unwrap();
    let at = barrier + ptx[barrier..].find("setp.eq.u32").unwrap();
    let bad = format!("{}setp.ne.u32{}", &ptx[..at], &ptx[at + "setp.eq.u32".len()..]);
    sim.replace_kernel("moegen_sm100_moe_sort_scatter", &bad).unwrap();
    assert_ne!(device_moe_sort(&mut sim, &ids, 600, &w, TileSize::T128).ok(), Some(want.clone()));
    // The per-expert counts of earlier chunks never rise: every chunk's ranks start at 0.
    let mut sim = SimBackend::new();
    sim.replace_kernel(
        "moegen_sm100_moe_sort_scatter",
        &mutated("moegen_sm100_moe_sort_scatter", "red.shared.max.u32", "red.shared.min.u32"),
    )
    .unwrap();
    assert_ne!(device_moe_sort(&mut sim, &ids, 600, &w, TileSize::T128).ok(), Some(want));
    // The one-block sort (300 tokens, 600 routes): the same two defects of its own.
    let ids = routing(300, 2, 8, 3, true);
    let want = moe_sort(&ids, 300, &w, TileSize::T128).unwrap();
    assert_eq!(
        device_moe_sort(&mut SimBackend::new(), &ids, 300, &w, TileSize::T128).ok(),
        Some(want.clone())
    );
    for (from, to) in [
        // Each route counted at most once per expert: the tile plan is wrong.
        ("atom.shared.add.u32", "atom.shared.max.u32"),
        // The earlier chunks' counts never rise.
        ("red.shared.max.u32", "red.shared.min.u32"),
    ] {
        let mut sim = SimBackend::new();
        sim.replace_kernel(
            "moegen_sm100_moe_sort_single",
            &mutated("moegen_sm100_moe_sort_single", from, to),
        )
        .unwrap();
        let got = device_moe_sort(&mut sim, &ids, 300, &w, TileSize::T128).ok();
        assert_ne!(got, Some(want.clone()), "{from} → {to}");
    }
    // A wrong constant (1/4 for 1/6) in the scale computation.
    let x: Vec<bf16> = (0..64).map(|i| bf16::from_f32(i as f32 - 30.0)).collect();
    let want = quantize_activations(&x, 1, 64, 10.0).unwrap();
    let mut sim = SimBackend::new();
    sim.replace_kernel(
        "moegen_sm100_quantize_nvfp4",
        &mutated("moegen_sm100_quantize_nvfp4", "0f3E2AAAAB", "0f3E800000"),
    )
    .unwrap();
    assert_ne!(device_quantize(&mut sim, &x, 1, 64, 10.0).unwrap(), want);
}

#[test]
fn hopper_flavour_matches_too() {
    // The sm_90a kernels (software E2M1 encoding) are the ones the H200 runs.
    let (tokens, hidden) = (5, 512);
    let mut r = Rng(23);
    let x: Vec<bf16> = (0..tokens * hidden)
        .map(|i| bf16::from_f32(((r.next() >> 40) as f32 / 1e6 - 8.0) * (1 + i % 7) as f32))
        .collect();
    let g = 448.0 * 6.0 / 60.0;
    let mut sim = SimBackend::hopper();
    assert_eq!(
        device_quantize(&mut sim, &x, tokens, hidden, g).unwrap(),
        quantize_activations(&x, tokens, hidden, g).unwrap()
    );
    let w = ExpertWindow::new(16, 4, 8, 4).unwrap();
    let ids = routing(200, 4, 16, 9, true);
    assert_eq!(
        device_moe_sort(&mut sim, &ids, 200, &w, TileSize::T256).unwrap(),
        moe_sort(&ids, 200, &w, TileSize::T256).unwrap()
    );
}

#[test]
fn differential_corpus_runs_in_the_simulator_with_known_answers() {
    let mut sim = SimBackend::hopper();
    let cases = moegen_validation::corpus::run_corpus(&mut sim).unwrap();
    assert_eq!(cases.len(), 3 + 8 + 3 + 4);
    let get = |name: &str| &cases.iter().find(|(n, _)| n == name).unwrap().1;
    // wgmma: the A fragments, accumulator layout and descriptor the Hopper kernels assume,
    // with the tensor cores' measured accumulation, for both operand sets.
    use moegen_validation::corpus::WgmmaOperands;
    for (which, ops) in [("layouts", WgmmaOperands::new()), ("wide", WgmmaOperands::wide())] {
        for (name, want) in ops.expected() {
            assert_eq!(get(&format!("{name} ({which})")), &want, "{name} ({which})");
        }
    }
    // Pipeline: consumer c reads bytes 8c..8c+8 of every chunk; odd source lanes copied only
    // 8 of their 16 bytes (the rest zero-filled).
    let mut x = 7u32.wrapping_mul(2_654_435_761).max(1);
    let src: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 11) as u8
        })
        .collect();
    let pipe = get("corpus_pipeline");
    for c in 0..64usize {
        let mut acc = 0u32;
        for chunk in 0..8 {
            let word = |w: usize| {
                let off = c * 8 + 4 * w;
                let lane = off / 16;
                if lane % 2 == 1 && off % 16 >= 8 {
                    0
                } else {
                    u32::from_le_bytes(
                        src[chunk * 512 + off..chunk * 512 + off + 4].try_into().unwrap(),
                    )
                }
            };
            acc ^= word(0);
            acc = acc.wrapping_add(word(1));
        }
        assert_eq!(
            u32::from_le_bytes(pipe[4 * c..4 * c + 4].try_into().unwrap()),
            acc,
            "consumer {c}"
        );
    }
    // TMA without swizzle at (0, 0): the box is rows of 16 bytes of the tensor.
    let boxes = get("corpus_tma boxes at (0, 0)");
    let mut x = 11u32.wrapping_mul(2_654_435_761).max(1);
    let tensor: Vec<u8> = (0..8320)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 11) as u8
        })
        .collect();
    for r in 0..8 {
        assert_eq!(&boxes[16 * r..16 * r + 16], &tensor[208 * r..208 * r + 16]);
    }
    // The store clipped at the far edges: bytes past the tensor are untouched.
    assert_eq!(get("corpus_tma store at (144, 36)").len(), 208 * 40);
    // Out of bounds at (-16, -4): the first 4 rows and the first 16 bytes of each are zero.
    let boxes = get("corpus_tma boxes at (-16, -4)");
    assert_eq!(boxes.len(), 128 + 256 + 512 + 1024);
    assert!(
        boxes[..16 * 8].iter().all(|&v| v == 0),
        "16-wide box lies entirely left of the tensor"
    );
    assert!(boxes[128..128 + 32 * 4].iter().all(|&v| v == 0), "rows above the tensor");
    // Cluster counters: 64 threads added 1; the largest global thread id is 63.
    assert_eq!(get("corpus_cluster counters"), &[64, 0, 0, 0, 63, 0, 0, 0]);
    // Both CTAs received the same multicast box and bulk-copied it out.
    let copies = get("corpus_cluster bulk copies");
    assert_eq!(copies[..1024], copies[1024..]);
    assert!(copies.iter().any(|&b| b != 0));
}
