//! `sim-bench`: how fast moegen-sim runs the generated kernels. Runs the whole layer (routing
//! sort, GEMM1, GEMM2) for a few tactics, prints simulated thread-instructions and MMAs per
//! second, and writes JSON. Build in release:
//! `cargo run --release -p moegen-validation --bin sim-bench -- [--json PATH]`.

use std::process::ExitCode;
use std::time::Instant;

use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::nvfp4_tactics;
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::{
    MoeShape, ReferenceOptions, Routing, prepare_weights, quantize_activations,
};
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::device_layer::{LayerInputs, device_moe_layer};

fn main() -> ExitCode {
    let json_path = std::env::args()
        .skip_while(|a| a != "--json")
        .nth(1)
        .unwrap_or_else(|| "target/bench/sim.json".into());
    let (h, i, k, tokens) = (512, 256, 2, 300);
    let Ok(window) = ExpertWindow::new(8, 2, 4, k) else { return ExitCode::from(1) };
    let Ok(shape) = MoeShape::new(h, i, window) else { return ExitCode::from(1) };
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let acts_f: Vec<f32> = (0..tokens * h).map(|_| rnd()).collect();
    let w =
        |n: usize, rnd: &mut dyn FnMut() -> f32| (0..n).map(|_| rnd() * 0.1).collect::<Vec<f32>>();
    let (up, gate, down) = (w(4 * i * h, &mut rnd), w(4 * i * h, &mut rnd), w(4 * h * i, &mut rnd));
    let setup = (|| {
        let gs = nvfp4_global_scale(block_amax(&acts_f))?;
        let acts = quantize_activations(&acts_f, tokens, h, gs)?;
        let weights = prepare_weights(&shape, &up, &gate, &down, gs, 100.0)?;
        Ok::<_, RuntimeError>((acts, weights))
    })();
    let (acts, weights) = match setup {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: preparing inputs: {e}");
            return ExitCode::from(1);
        }
    };
    let experts: Vec<i32> = (0..tokens * k).map(|j| (j % 4) as i32 + 4 * (j % 2) as i32).collect();
    let routing = Routing { tokens, experts, weights: vec![0.5; tokens * k] };
    let inputs = LayerInputs { shape: &shape, acts: &acts, weights: &weights, routing: &routing };
    println!(
        "moegen-sim on the whole layer: H {h}, I {i}, 4 of 8 experts local, k {k}, {tokens} tokens"
    );
    println!(
        "{:<40} {:>10} {:>14} {:>12} {:>10}",
        "tactic", "seconds", "thread-instr", "instr/s", "MMA/s"
    );
    let mut rows = Vec::new();
    for t in [nvfp4_tactics()[0], nvfp4_tactics()[15]] {
        let mut sim = SimBackend::new();
        let t0 = Instant::now();
        if let Err(e) = device_moe_layer(&mut sim, &inputs, &t, ReferenceOptions::default(), 4) {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
        let s = t0.elapsed().as_secs_f64();
        let ips = sim.thread_instructions as f64 / s;
        let mps = sim.mma_instructions as f64 / s;
        println!(
            "{:<40} {:>10.2} {:>14} {:>12.3e} {:>10.1}",
            t.to_string(),
            s,
            sim.thread_instructions,
            ips,
            mps
        );
        rows.push(format!(
            "{{\"tactic\": \"{t}\", \"seconds\": {s}, \"thread_instructions\": {}, \"mma_instructions\": {}, \"instructions_per_second\": {ips}}}",
            sim.thread_instructions, sim.mma_instructions
        ));
    }
    if let Some(parent) = std::path::Path::new(&json_path).parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if let Err(e) = std::fs::write(&json_path, format!("[\n  {}\n]\n", rows.join(",\n  "))) {
        eprintln!("error: writing {json_path}: {e}");
        return ExitCode::from(1);
    }
    println!("wrote {json_path}");
    ExitCode::SUCCESS
}
