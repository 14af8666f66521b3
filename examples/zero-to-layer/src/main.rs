//! From zero to a layer: a small NVFP4 MoE layer built, run and read back on moegen's
//! simulator backend (the CPU: no GPU, no CUDA). On a GPU only the backend line changes.

use moegen_runtime::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The layer: hidden size H, expert intermediate size I (multiples of 64), 8 experts of
    // which this rank holds 2..6, 2 experts per token. Routes to experts outside the
    // window are skipped (another rank adds them).
    let (hidden, intermediate, tokens) = (512, 256, 4);
    let shape = MoeShape::new(hidden, intermediate, ExpertWindow::new(8, 2, 4, 2)?)?;
    let local = shape.local_experts();

    // Deterministic stand-ins for a checkpoint and a batch.
    let mut seed = 1u32;
    let mut next = move |scale: f32| {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * scale
    };
    // Unquantized weights, row-major: up and gate [local, I, H], down [local, H, I].
    let mut weights = |n: usize, fan_in: usize| -> Vec<f32> {
        (0..n).map(|_| next(2.0 / (fan_in as f32).sqrt())).collect()
    };
    let up = weights(local * intermediate * hidden, hidden);
    let gate = weights(local * intermediate * hidden, hidden);
    let down = weights(local * hidden * intermediate, intermediate);
    let x: Vec<bf16> =
        (0..tokens * hidden).map(|i| bf16::from_f32((i % 13) as f32 / 4.0 - 1.5)).collect();
    // Per token and slot: a global expert id (i32) and its router weight (f32).
    let expert_ids: Vec<i32> = (0..tokens * 2).map(|j| ((j * 3) % 8) as i32).collect();
    let router_weights: Vec<f32> =
        (0..tokens * 2).map(|j| if j % 2 == 0 { 0.75 } else { 0.25 }).collect();

    // Static global scales, from a calibration run (here: this batch). `input_scale` is the
    // activations' NVFP4 global scale, 448·6 / amax(x); `fc2_input_scale` is GEMM1's
    // output's (the activations of GEMM2), 448·6 / amax(h). A ModelOpt NVFP4 checkpoint
    // stores both (`ModelOptNvfp4Experts::input_scale()` and `fc2_input_scale()`).
    let x_f32: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    let input_scale = nvfp4_global_scale(block_amax(&x_f32))?;
    let fc2_input_scale = 448.0 * 6.0 / 8.0; // an amax(h) of 8, assumed
    // Quantize the weights to NVFP4 in the kernels' layout, once, on the host
    // (`import_nvfp4` / `import_mxfp4` take checkpoints that are already 4-bit).
    let prepared = prepare_weights(&shape, &up, &gate, &down, input_scale, fc2_input_scale)?;

    // The device: the simulator. On a GPU: `CudaBackend::on_stream(stream)?` (feature
    // `cuda`, the default), with the engine's stream.
    let mut gpu = SimBackend::new();
    let arch = arch_of(&gpu);
    let kernels = KernelSet::builtin();
    let max_tokens = 16;

    // Which tactics can run this layer, and one per token bucket from the analytic model
    // (`autotune` can replace it with timed choices). An empty list is an error that says
    // why each tactic was rejected.
    let config = LayerConfig::new(shape);
    let tactics = MoeLayer::candidates(&config, &kernels, max_tokens, arch, WeightFormat::Nvfp4)?;
    let device = DeviceModel::for_arch(arch).with_sms(gpu.sm_count());
    let table = DispatchTable::analytic(&shape, max_tokens, &tactics, &device)?;

    // One workspace for every layer of the model, sized for the largest; refused up front
    // when the kernel set cannot serve it.
    let workspace = Workspace::new(
        &mut gpu,
        &kernels,
        WorkspaceSpec {
            max_tokens: max_tokens as usize,
            top_k: shape.top_k(),
            max_local_experts: local,
            max_hidden: hidden,
            max_intermediate: intermediate,
            tile_sizes: table.tile_sizes(),
            deterministic: config.finalize == FinalizeMode::Deterministic,
            arch,
            activations: config.activations,
        },
    )?;
    // Weights uploaded once, then the layer.
    let layer_weights = LayerWeights::upload(&mut gpu, &shape, &prepared, input_scale)?;
    let layer = MoeLayer::new(&gpu, config, layer_weights, &kernels, table)?;

    // A forward pass over device buffers (an engine passes its own, as `DeviceSlice`s).
    let io = ForwardIo {
        tokens,
        activations: gpu.upload_slice(&x)?,
        expert_ids: gpu.upload_slice(&expert_ids)?,
        expert_weights: gpu.upload_slice(&router_weights)?,
        output: gpu.alloc_slice::<bf16>(tokens * hidden)?,
    };
    let tactic = layer.forward(&mut gpu, &workspace, &io)?;
    layer.check_errors(&mut gpu, &workspace)?;
    let output: Vec<bf16> = gpu.download_slice(io.output)?;

    // The CPU reference of the same layer gives the same bits.
    let activations = quantize_activations(&x_f32, tokens, hidden, input_scale)?;
    let routing = Routing { tokens, experts: expert_ids, weights: router_weights };
    let options = ReferenceOptions {
        swiglu_input: config.swiglu_input,
        recipe: config.recipe_on(Target::Sm100f),
        finalize: config.finalize,
    };
    let reference =
        moe_reference(&shape, &activations, &prepared, &routing, tactic.tile(), options)?;
    println!("{tokens} tokens through {tactic}: output[0..4] = {:?}", &output[..4]);
    if output != reference.output {
        return Err("the layer differs from the CPU reference".into());
    }
    println!("bit-identical to the CPU reference");

    // Unloading the model: what moegen allocated goes back (the `io` buffers are the
    // caller's to free).
    layer.release(&mut gpu)?;
    workspace.release(&mut gpu)?;
    gpu.free_all(&[io.activations.ptr, io.expert_ids.ptr, io.expert_weights.ptr, io.output.ptr])?;
    Ok(())
}
