//! `gpu-check`: runs moegen's SIMT kernels (routing sort, NVFP4 quantization, deterministic
//! finalize) on a CUDA GPU and on the simulator, and compares both with the CPU reference
//! byte for byte. Prints a table and writes JSON. Runs on any CUDA machine with a driver;
//! build with `cargo build --release -p moegen-validation --bin gpu-check`.

use std::process::ExitCode;

use half::bf16;
use moegen_dsl::abi::{CorpusKernel, KernelId, KernelInfo, SimtTarget};
use moegen_dsl::{FinalizeMode, TileSize};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::{device_finalize_reduce, device_moe_sort, device_quantize};
use moegen_runtime::reference::{finalize, quantize_activations};
use moegen_runtime::routing::{ExpertWindow, moe_sort};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One check to run against the GPU.
type Case = Box<dyn Fn(&mut CudaBackend) -> Result<Row, String>>;

struct Row {
    case: String,
    gpu_equal: bool,
    sim_equal: Option<bool>,
}

/// A simulator running the same kernel flavour as the GPU.
fn sim_like(gpu: &CudaBackend) -> SimBackend {
    match gpu.simt_target() {
        SimtTarget::Sm90a => SimBackend::hopper(),
        SimtTarget::Sm100f => SimBackend::new(),
    }
}

/// A routing case: tokens, top_k, experts, local offset, local count, tile.
struct SortCase(usize, usize, usize, usize, usize, TileSize);

fn sort_case(gpu: &mut CudaBackend, c: SortCase, sim: bool) -> Result<Row, String> {
    let SortCase(tokens, k, experts, offset, local, tile) = c;
    let w = ExpertWindow::new(experts, offset, local, k).map_err(|e| e.to_string())?;
    let mut r = Rng(tokens as u64 * 31 + k as u64);
    let ids: Vec<i32> = (0..tokens * k)
        .map(|_| {
            if r.next().is_multiple_of(4) {
                offset as i32
            } else {
                (r.next() % experts as u64) as i32
            }
        })
        .collect();
    let want = moe_sort(&ids, tokens, &w, tile).map_err(|e| e.to_string())?;
    let got = device_moe_sort(gpu, &ids, tokens, &w, tile).map_err(|e| e.to_string())?;
    let sim_equal = if sim {
        let mut s = sim_like(gpu);
        Some(device_moe_sort(&mut s, &ids, tokens, &w, tile).map_err(|e| e.to_string())? == want)
    } else {
        None
    };
    Ok(Row {
        case: format!("moe_sort N={tokens} k={k} E={experts} L={local}@{offset} T={}", tile.rows()),
        gpu_equal: got == want,
        sim_equal,
    })
}

fn quantize_case(
    gpu: &mut CudaBackend,
    tokens: usize,
    hidden: usize,
    sim: bool,
) -> Result<Row, String> {
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
    let want = quantize_activations(&x, tokens, hidden, g).map_err(|e| e.to_string())?;
    let got = device_quantize(gpu, &x, tokens, hidden, g).map_err(|e| e.to_string())?;
    let sim_equal = if sim {
        let mut s = sim_like(gpu);
        Some(device_quantize(&mut s, &x, tokens, hidden, g).map_err(|e| e.to_string())? == want)
    } else {
        None
    };
    Ok(Row { case: format!("quantize_nvfp4 {tokens}x{hidden}"), gpu_equal: got == want, sim_equal })
}

fn finalize_case(
    gpu: &mut CudaBackend,
    tokens: usize,
    k: usize,
    hidden: usize,
    sim: bool,
) -> Result<Row, String> {
    let mut r = Rng(tokens as u64 * 3 + 1);
    let e2p: Vec<i32> =
        (0..tokens * k).map(|i| if r.next().is_multiple_of(5) { -1 } else { i as i32 }).collect();
    let contrib: Vec<f32> = (0..tokens * k * hidden)
        .map(|i| {
            if e2p[i / hidden] < 0 {
                0.0
            } else {
                bf16::from_f32((r.next() >> 40) as f32 / 1e6 - 8.0).to_f32()
            }
        })
        .collect();
    let want = finalize(&contrib, tokens, k, hidden, FinalizeMode::Deterministic)
        .map_err(|e| e.to_string())?;
    let got = device_finalize_reduce(gpu, &contrib, &e2p, tokens, k, hidden)
        .map_err(|e| e.to_string())?;
    let sim_equal = if sim {
        let mut s = sim_like(gpu);
        Some(
            device_finalize_reduce(&mut s, &contrib, &e2p, tokens, k, hidden)
                .map_err(|e| e.to_string())?
                == want,
        )
    } else {
        None
    };
    Ok(Row {
        case: format!("finalize_reduce N={tokens} k={k} H={hidden}"),
        gpu_equal: got == want,
        sim_equal,
    })
}

/// Diagnostic: runs one patched variant of the TMA corpus kernel (0 full, 1 without the
/// tile store, 2 also with only the unswizzled load) and reports whether it ran.
fn tma_variant(gpu: &mut CudaBackend, v: u32, c0: i32, c1: i32) -> ExitCode {
    use moegen_runtime::backend::{KernelArg, LaunchShape, TensorMapSpec, TmaElement};
    let Some(k) = moegen_kernels::find(&KernelId::Corpus(CorpusKernel::Tma)) else {
        return ExitCode::from(1);
    };
    let mut text: Vec<String> = k.ptx.lines().map(str::to_owned).collect();
    if v >= 1 {
        text.retain(|l| !l.contains("cp.async.bulk.tensor.2d.global.shared::cta"));
    }
    if v >= 2 {
        let mut seen = 0;
        text.retain(|l| {
            if l.contains("cp.async.bulk.tensor.2d.shared::cluster") {
                seen += 1;
                return seen == 1;
            }
            true
        });
        for l in &mut text {
            *l = l.replace(", 1920;", ", 128;");
        }
    }
    let ptx: &'static str = Box::leak(text.join("\n").into_boxed_str());
    // A diagnostic process runs one variant and exits: leaking it is the simple lifetime.
    let patched: &'static KernelInfo = Box::leak(Box::new(KernelInfo { ptx, ..*k }));
    let mut run = || -> Result<(), String> {
        let tensor = gpu.upload_new(&vec![7u8; 208 * 40]).map_err(|e| e.to_string())?;
        let mut args = Vec::new();
        for i in 0..5u32 {
            let (bx, sw) =
                if i == 4 { (128, 128) } else { (16 << i, if i == 0 { 0 } else { 16 << i }) };
            let spec = TensorMapSpec {
                element: TmaElement::U8,
                address: tensor,
                dims: vec![208, 40],
                strides: vec![208],
                box_dims: vec![bx, 8],
                swizzle: sw,
            };
            let map = gpu.encode_tensor_map(&spec).map_err(|e| e.to_string())?;
            args.push(KernelArg::TensorMap(Box::new(map)));
        }
        let po = gpu.alloc(4096).map_err(|e| e.to_string())?;
        args.extend([
            KernelArg::U32(c0 as u32),
            KernelArg::U32(c1 as u32),
            KernelArg::U32(c0.max(0) as u32),
            KernelArg::U32(c1.max(0) as u32),
            KernelArg::Ptr(po),
        ]);
        let shape = LaunchShape { grid: 1, block: 32, cluster: 1, dynamic_smem: 5120 };
        gpu.launch(patched, shape, &args).map_err(|e| e.to_string())
    };
    match run() {
        Ok(()) => {
            println!("tma variant {v} at ({c0}, {c1}): ran");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("tma variant {v} at ({c0}, {c1}): {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    if let Some(v) =
        std::env::args().skip_while(|a| a != "--tma-variant").nth(1).and_then(|v| v.parse().ok())
    {
        return match CudaBackend::new(0) {
            Ok(mut g) => {
                let arg = |name: &str| {
                    std::env::args()
                        .skip_while(|a| a != name)
                        .nth(1)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                tma_variant(&mut g, v, arg("--c0"), arg("--c1"))
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        };
    }
    let json_path = std::env::args()
        .skip_while(|a| a != "--json")
        .nth(1)
        .unwrap_or_else(|| "gpu-check.json".into());
    let mut gpu = match CudaBackend::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "device: {} (sm_{}{}), kernels: {}",
        gpu.name,
        gpu.compute_capability.0,
        gpu.compute_capability.1,
        gpu.simt_target()
    );
    let mut rows = Vec::new();
    let cases: Vec<Case> = vec![
        Box::new(|g| sort_case(g, SortCase(1, 2, 8, 2, 4, TileSize::T128), true)),
        Box::new(|g| sort_case(g, SortCase(300, 2, 8, 4, 4, TileSize::T128), true)),
        Box::new(|g| sort_case(g, SortCase(513, 8, 64, 8, 8, TileSize::T256), true)),
        Box::new(|g| sort_case(g, SortCase(4096, 8, 256, 0, 32, TileSize::T128), false)),
        Box::new(|g| sort_case(g, SortCase(16384, 8, 256, 32, 32, TileSize::T256), false)),
        Box::new(|g| sort_case(g, SortCase(16384, 8, 256, 0, 256, TileSize::T128), false)),
        Box::new(|g| quantize_case(g, 7, 256, true)),
        Box::new(|g| quantize_case(g, 1000, 7168, false)),
        Box::new(|g| finalize_case(g, 9, 4, 64, true)),
        Box::new(|g| finalize_case(g, 2048, 8, 7168, false)),
    ];
    let mut failed = false;
    for c in cases {
        match c(&mut gpu) {
            Ok(r) => {
                failed |= !r.gpu_equal || r.sim_equal == Some(false);
                rows.push(r);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    // The differential corpus: the same sm_90a PTX on the GPU and in the simulator.
    let corpus_gpu = moegen_validation::corpus::run_corpus_logged(&mut gpu, &mut |k| {
        eprintln!("running {k} on the GPU")
    });
    let corpus_sim = moegen_validation::corpus::run_corpus(&mut sim_like(&gpu));
    match (corpus_gpu, corpus_sim) {
        (Ok(g), Ok(s)) => {
            // Every differing byte (first 64 per case), for diagnosis.
            let mut diffs = String::new();
            for ((name, gb), (_, sb)) in g.iter().zip(&s) {
                for (i, (x, y)) in
                    gb.iter().zip(sb).enumerate().filter(|(_, (x, y))| x != y).take(64)
                {
                    diffs.push_str(&format!("{name} byte {i}: gpu {x:#04x} sim {y:#04x}\n"));
                }
            }
            let diff_path = std::path::Path::new(&json_path).with_file_name("corpus-diffs.txt");
            let _ = std::fs::write(&diff_path, &diffs);
            for ((name, gb), (_, sb)) in g.iter().zip(&s) {
                let same = gb == sb;
                failed |= !same;
                let first_diff = gb.iter().zip(sb).position(|(x, y)| x != y);
                rows.push(Row {
                    case: format!(
                        "{name} ({} B){}",
                        gb.len(),
                        first_diff.map_or(String::new(), |d| format!(" first diff at {d}"))
                    ),
                    gpu_equal: same,
                    sim_equal: None,
                });
            }
        }
        (g, s) => {
            eprintln!("error: corpus: gpu {:?}, sim {:?}", g.err(), s.err());
            return ExitCode::from(1);
        }
    }
    println!("{:<52} {:>12} {:>12}", "case", "GPU = CPU", "sim = CPU");
    println!("(corpus rows: GPU = simulator, byte for byte)");
    println!("(the simulator runs the same {} PTX as the GPU)", gpu.simt_target());
    for r in &rows {
        let sim = r
            .sim_equal
            .map_or("-".to_owned(), |b| if b { "identical" } else { "DIFFERS" }.to_owned());
        println!(
            "{:<52} {:>12} {:>12}",
            r.case,
            if r.gpu_equal { "identical" } else { "DIFFERS" },
            sim
        );
    }
    let json: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"case\": \"{}\", \"gpu_identical\": {}, \"sim_identical\": {}}}",
                r.case,
                r.gpu_equal,
                r.sim_equal.map_or("null".to_owned(), |b| b.to_string())
            )
        })
        .collect();
    let text =
        format!("{{\"device\": \"{}\", \"cases\": [\n  {}\n]}}\n", gpu.name, json.join(",\n  "));
    if let Err(e) = std::fs::write(&json_path, text) {
        eprintln!("error: writing {json_path}: {e}");
        return ExitCode::from(1);
    }
    println!("wrote {json_path}");
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
