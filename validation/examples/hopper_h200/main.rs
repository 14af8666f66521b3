//! The Hopper kernels on an sm_90 GPU, against the CPU reference and the H200's measured
//! wgmma arithmetic (docs/hopper.md). Each argument is one check; none means all but bench:
//!
//! ```text
//! cargo run --release -p moegen-validation --example hopper_h200 -- \
//!     [corpus] [gemms] [bench H I E L k tokens T N1 N2]
//! ```
//!
//! - `corpus`: `corpus_wgmma` (rendered by codegen: the ABI does not list it yet) on both
//!   operand sets, against `WgmmaOperands::expected`.
//! - `gemms`: every NVFP4 GEMM of the default set with A16 and A4, and the shipped MXFP4
//!   ones, on a layer `HOPPER_SHAPE="H,I,E,offset,L,k,tokens"` (default 256,128,8,2,4,2,45),
//!   with `HOPPER_CTAS=n` persistent CTAs (default one per SM).
//! - `bench`: timings of one tactic.
//!
//! Exits 1 when a check fails, 2 without a device.

mod bench;
mod gemms;
mod model;
mod problem;

use std::process::ExitCode;

use moegen_codegen::kernels::corpus_wgmma;
use moegen_dsl::ActivationFormat;
use moegen_dsl::abi::{CorpusKernel, GridRule, KernelId, KernelInfo, LaunchFacts, SmemRule};
use moegen_dsl::kernel_desc::BlockScaledFormat;
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_validation::corpus::{WgmmaOperands, run_wgmma};

use gemms::Tiles;
use problem::{Problem, mxfp4_weights};

/// `corpus_wgmma` as a `KernelInfo`. Until the ABI has `CorpusKernel::Wgmma`, the id is a
/// stand-in: the backends load modules by their PTX and launch entries by name.
fn corpus_kernel() -> Result<&'static KernelInfo, String> {
    let ptx: &'static str = Box::leak(corpus_wgmma::render()?.into_boxed_str());
    Ok(Box::leak(Box::new(KernelInfo {
        id: KernelId::Corpus(CorpusKernel::Warp),
        name: corpus_wgmma::NAME,
        ptx_target: "sm_90a",
        ptx,
        params: corpus_wgmma::CORPUS_WGMMA,
        launch: LaunchFacts {
            threads: corpus_wgmma::THREADS,
            cluster: 1,
            smem: SmemRule { fixed: corpus_wgmma::SMEM_BYTES, per_local_expert: 0 },
            tmem_columns: 0,
            grid: GridRule::OneCluster,
        },
    })))
}

fn corpus(b: &mut dyn Backend) -> Result<bool, String> {
    let k = corpus_kernel()?;
    let mut ok = true;
    for (case, ops) in [("layout", WgmmaOperands::new()), ("wide", WgmmaOperands::wide())] {
        let got = run_wgmma(b, k, &ops).map_err(|e| e.to_string())?;
        for ((name, g), (_, w)) in got.iter().zip(&ops.expected()) {
            let differ = g.chunks(4).zip(w.chunks(4)).filter(|(x, y)| x != y).count();
            println!("{name} ({case}): {differ} of {} registers differ", g.len() / 4);
            ok &= differ == 0 && g.len() == w.len();
        }
    }
    Ok(ok)
}

fn env_list(name: &str) -> Option<Vec<usize>> {
    std::env::var(name).ok().map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
}

fn gemms(b: &mut dyn Backend) -> Result<bool, String> {
    let dims = env_list("HOPPER_SHAPE").unwrap_or_else(|| vec![256, 128, 8, 2, 4, 2, 45]);
    let dims: [usize; 7] = dims.try_into().map_err(|_| "HOPPER_SHAPE takes 7 numbers")?;
    let ctas = std::env::var("HOPPER_CTAS").ok().and_then(|v| v.parse().ok());
    let p = Problem::new(dims)?;
    let every: Vec<Tiles> = [16, 32, 64, 128]
        .map(|tile| Tiles { tile, gemm1: vec![128, 256], gemm2: vec![64, 128, 256] })
        .into();
    let mut ok = true;
    for act in [ActivationFormat::Bf16, ActivationFormat::Nvfp4] {
        println!("NVFP4 weights, {act:?} activations");
        ok &= gemms::check(b, &p, &p.sm90(act)?, BlockScaledFormat::NVFP4, &every, ctas)?;
    }
    println!("MXFP4 weights, bf16 activations");
    let shipped: Vec<Tiles> = moegen_codegen::kernel_set::sm90_mxfp4_tactics()
        .iter()
        .map(|t| Tiles {
            tile: t.tile().rows(),
            gemm1: vec![t.gemm1().mma_tiler()[1]],
            gemm2: vec![t.gemm2().mma_tiler()[1]],
        })
        .collect();
    let w = mxfp4_weights(&p.shape);
    ok &= gemms::check(b, &p, &w, BlockScaledFormat::MXFP4, &shipped, ctas)?;
    Ok(ok)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut b = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("no CUDA device: {e}");
            return ExitCode::from(2);
        }
    };
    println!("device: {} ({} SMs)", b.device_key(), b.sm_count());
    let all = args.is_empty();
    let mut ok = true;
    let mut step = |name: &str, r: Result<bool, String>| match r {
        Ok(v) => ok &= v,
        Err(e) => {
            println!("{name}: {e}");
            ok = false;
        }
    };
    if all || args.iter().any(|a| a == "corpus") {
        step("corpus", corpus(&mut b));
    }
    if all || args.iter().any(|a| a == "gemms") {
        step("gemms", gemms(&mut b));
    }
    if let Some(pos) = args.iter().position(|a| a == "bench") {
        let spec: Vec<usize> = args[pos + 1..].iter().filter_map(|x| x.parse().ok()).collect();
        let r = <[usize; 9]>::try_from(spec)
            .map_err(|_| "bench takes H I E L k tokens T N1 N2".to_owned())
            .and_then(|s| bench::bench(&mut b, s).map(|()| true));
        step("bench", r);
    }
    println!("{}", if ok { "ALL OK" } else { "FAILURES" });
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
