//! No silent options: every option a kernel description accepts either changes the emitted
//! kernel or is refused with a typed error naming it.

use moegen_codegen::kernel_set::gemm_kernel;
use moegen_dsl::DescError;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::resources::ResourceError;
use moegen_dsl::{
    ActivationFormat, EpilogueRecipe, FinalizeMode, GemmKind, GemmTactic, KernelDescBuilder,
    Raster, SwigluInput, Target,
};

fn tactic(kind: GemmKind, raster: Raster) -> GemmTactic {
    let cluster_n = 1;
    GemmTactic::new(kind, [128, 128], [1, cluster_n], raster).unwrap()
}

fn ptx(b: KernelDescBuilder) -> Result<String, DescError> {
    let desc = b.build()?;
    Ok(gemm_kernel(&desc).unwrap().ptx)
}

/// What an option did to a kernel: changed its PTX or was refused.
fn changes_or_refuses(base: &str, b: KernelDescBuilder, option: &str) {
    match ptx(b) {
        Ok(text) => assert_ne!(text, base, "{option} was accepted and changed nothing"),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty(), "{option}: refused without a message");
        }
    }
}

#[test]
fn every_builder_option_changes_the_kernel_or_is_refused() {
    for kind in [GemmKind::Gemm1, GemmKind::Gemm2] {
        let t = tactic(kind, Raster::AlongN);
        let base = ptx(KernelDescBuilder::new(t)).unwrap();
        // Target.
        let other = ptx(KernelDescBuilder::new(t).target(Target::Sm100a)).unwrap();
        assert_ne!(other, base, "target");
        assert!(other.contains(".target sm_100a"));
        // Format: MXFP4 weights need MXFP8 activations (refused by name without them), and
        // with them are another kernel (`kind::mxf8f6f4`); MXFP8 refuses NVFP4 weights.
        let e = KernelDescBuilder::new(t).format(WeightFormat::Mxfp4).build().unwrap_err();
        assert!(matches!(e, DescError::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("MXFP4 weights without MXFP8"), "{e}");
        let mx = KernelDescBuilder::new(t)
            .format(WeightFormat::Mxfp4)
            .activations(ActivationFormat::Mxfp8);
        let text = ptx(mx).unwrap();
        assert!(text.contains("kind::mxf8f6f4") && !base.contains("kind::mxf8f6f4"));
        let e = KernelDescBuilder::new(t).activations(ActivationFormat::Mxfp8).build().unwrap_err();
        assert!(e.to_string().contains("MXFP8 activations with NVFP4 weights"), "{e}");
        let e = KernelDescBuilder::new(t).activations(ActivationFormat::Fp8).build().unwrap_err();
        assert!(e.to_string().contains("per-row FP8"), "{e}");
        // Raster: the persistent schedule walks N fastest; AlongM is refused by name.
        let e = KernelDescBuilder::new(tactic(kind, Raster::AlongM)).build().unwrap_err();
        assert!(e.to_string().contains("raster AlongM"), "{e}");
        // Pipeline depths: shallower changes the kernel, deeper is refused.
        let deep = KernelDescBuilder::new(t).build().unwrap().budget().ab_stages;
        changes_or_refuses(&base, KernelDescBuilder::new(t).depths(2, 1), "depths(2, 1)");
        let e = KernelDescBuilder::new(t).depths(deep + 1, 1).build().unwrap_err();
        assert!(matches!(e, DescError::Resources(ResourceError::DepthOutOfRange { .. })), "{e}");
        // Activations: SM100's block-scaled MMA takes NVFP4 only; bf16 is refused by name.
        let e = KernelDescBuilder::new(t).activations(ActivationFormat::Bf16).build().unwrap_err();
        assert!(e.to_string().contains("bf16 activations"), "{e}");
        // Epilogue options: each changes its own GEMM and is refused by the other.
        let glu = KernelDescBuilder::new(t).swiglu_input(SwigluInput::Bf16);
        let fin = KernelDescBuilder::new(t).finalize(FinalizeMode::Deterministic);
        let exact = KernelDescBuilder::new(t).recipe(EpilogueRecipe::Exact);
        match kind {
            GemmKind::Gemm1 => {
                changes_or_refuses(&base, glu, "swiglu_input(Bf16)");
                let e = fin.build().unwrap_err();
                assert!(e.to_string().contains("finalize mode"), "{e}");
                // Fast is SM100's default; Exact is another kernel.
                assert_eq!(Target::Sm100f.default_recipe(), EpilogueRecipe::Fast);
                let fast = ptx(KernelDescBuilder::new(t).recipe(EpilogueRecipe::Fast)).unwrap();
                assert_eq!(fast, base, "recipe(Fast) is the default");
                let text = ptx(exact).unwrap();
                assert_ne!(text, base, "recipe(Exact) changed nothing");
                assert!(
                    !text.contains("ex2.approx") && base.contains("ex2.approx"),
                    "Exact must not use ex2.approx, Fast must"
                );
            }
            GemmKind::Gemm2 => {
                changes_or_refuses(&base, fin, "finalize(Deterministic)");
                let e = glu.build().unwrap_err();
                assert!(e.to_string().contains("SwiGLU input"), "{e}");
                let e = exact.build().unwrap_err();
                assert!(e.to_string().contains("epilogue recipe"), "{e}");
            }
        }
    }
}

#[test]
fn overridden_depths_are_part_of_the_kernels_name() {
    let t = tactic(GemmKind::Gemm2, Raster::AlongN);
    let planned = KernelDescBuilder::new(t).build().unwrap();
    let shallow = KernelDescBuilder::new(t).depths(2, 1).build().unwrap();
    assert_eq!(planned.key().name(), "moegen_sm100_nvfp4_gemm2_t128_n128_c1x1");
    assert_eq!(shallow.key().name(), "moegen_sm100_nvfp4_gemm2_t128_n128_c1x1_s2x1");
    // Asking for the planned depths explicitly is the same kernel.
    let (ab, acc) = (planned.budget().ab_stages, planned.budget().acc_stages);
    assert_eq!(KernelDescBuilder::new(t).depths(ab, acc).build().unwrap().key(), planned.key());
    // A key rebuilds the description it came from.
    assert_eq!(shallow.key().desc().unwrap(), shallow);
}

/// GEMM1's activation and both GEMMs' biases: on both targets each changes the kernel, its
/// name and its parameters (GemmKey round-trips through them); GEMM2 refuses an activation.
#[test]
fn activations_and_biases_change_the_kernels_of_both_targets() {
    use moegen_dsl::abi::{Buffer, KernelId, ParamKind, params};
    use moegen_dsl::{Activation, ActivationFormat as A};
    let has = |key, b: Buffer| {
        params(&KernelId::Gemm(key)).iter().any(|p| p.kind == ParamKind::Buffer(b))
    };
    for acts in [A::Bf16, A::Nvfp4, A::Fp8] {
        let format = if acts == A::Fp8 { WeightFormat::Mxfp4 } else { WeightFormat::Nvfp4 };
        for kind in [GemmKind::Gemm1, GemmKind::Gemm2] {
            let t = GemmTactic::new_sm90(kind, 64, 128).unwrap();
            let b =
                || KernelDescBuilder::new(t).target(Target::Sm90a).format(format).activations(acts);
            let base = b().build().unwrap();
            let base_ptx = ptx(b()).unwrap();
            let bias = b().bias(true).build().unwrap();
            assert!(bias.key().name().ends_with("_bias"), "{}", bias.key().name());
            assert_ne!(ptx(b().bias(true)).unwrap(), base_ptx, "{kind} {acts:?}: bias");
            let buffer = match kind {
                GemmKind::Gemm1 => Buffer::Gemm1Bias,
                GemmKind::Gemm2 => Buffer::Gemm2Bias,
            };
            assert!(has(bias.key(), buffer) && !has(base.key(), buffer));
            assert_eq!(bias.key().desc().unwrap(), bias);
            match kind {
                GemmKind::Gemm1 => {
                    let mut seen = vec![base_ptx.clone()];
                    for a in [Activation::SwigluClamped, Activation::GegluTanh] {
                        let d = b().activation(a).build().unwrap();
                        assert!(d.key().name().contains(a.tag()), "{}", d.key().name());
                        assert_eq!(d.key().desc().unwrap(), d);
                        assert_eq!(has(d.key(), Buffer::ActivationParams), a.has_params());
                        let text = ptx(b().activation(a)).unwrap();
                        assert!(!seen.contains(&text), "{a:?} changed nothing");
                        seen.push(text);
                    }
                }
                GemmKind::Gemm2 => {
                    let e = b().activation(Activation::GegluTanh).build().unwrap_err();
                    assert!(e.to_string().contains("activation"), "{e}");
                }
            }
            // ReLU² (ungated, W1 with I rows): its own GEMM1 with and without a bias for
            // every activation format; GEMM2 refuses an activation.
            match kind {
                GemmKind::Gemm1 => {
                    let mut seen = vec![base_ptx.clone(), ptx(b().bias(true)).unwrap()];
                    for bias in [false, true] {
                        let d = b().activation(Activation::Relu2).bias(bias).build().unwrap();
                        assert!(d.key().name().contains("relu2"), "{}", d.key().name());
                        assert_eq!(d.key().desc().unwrap(), d);
                        assert!(!has(d.key(), Buffer::ActivationParams));
                        assert_eq!(has(d.key(), Buffer::Gemm1Bias), bias);
                        let text = ptx(b().activation(Activation::Relu2).bias(bias)).unwrap();
                        assert!(
                            !seen.contains(&text),
                            "{acts:?} relu2 bias {bias} changed nothing"
                        );
                        seen.push(text);
                    }
                }
                GemmKind::Gemm2 => {
                    let e = b().activation(Activation::Relu2).build().unwrap_err();
                    assert!(e.to_string().contains("activation"), "{acts:?}: {e}");
                }
            }
        }
    }
    // SM100, both recipes: each option changes the kernel; GEMM2 refuses an activation.
    for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
        let t = tactic(GemmKind::Gemm1, Raster::AlongN);
        let b = || KernelDescBuilder::new(t).recipe(recipe);
        let mut seen = vec![ptx(b()).unwrap()];
        for a in [Activation::SwigluClamped, Activation::GegluTanh] {
            for bias in [false, true] {
                let d = b().activation(a).bias(bias).build().unwrap();
                assert_eq!(has(d.key(), Buffer::ActivationParams), a.has_params());
                assert_eq!(has(d.key(), Buffer::Gemm1Bias), bias);
                let text = ptx(b().activation(a).bias(bias)).unwrap();
                assert!(!seen.contains(&text), "{recipe:?} {a:?} bias {bias} changed nothing");
                seen.push(text);
            }
        }
        let text = ptx(b().bias(true)).unwrap();
        assert!(!seen.contains(&text), "{recipe:?}: GEMM1 bias changed nothing");
        // ReLU² (ungated, W1 with I rows): its own epilogue, with and without a bias.
        for bias in [false, true] {
            let d = b().activation(Activation::Relu2).bias(bias).build().unwrap();
            assert!(d.key().name().contains("relu2"), "{}", d.key().name());
            assert_eq!(d.key().desc().unwrap(), d);
            assert!(!has(d.key(), Buffer::ActivationParams));
            assert_eq!(has(d.key(), Buffer::Gemm1Bias), bias);
            let text = ptx(b().activation(Activation::Relu2).bias(bias)).unwrap();
            assert!(!seen.contains(&text), "{recipe:?} relu2 bias {bias} changed nothing");
            seen.push(text);
        }
    }
    let t = tactic(GemmKind::Gemm2, Raster::AlongN);
    let d = KernelDescBuilder::new(t).bias(true).build().unwrap();
    assert!(has(d.key(), Buffer::Gemm2Bias));
    let plain = ptx(KernelDescBuilder::new(t)).unwrap();
    assert_ne!(ptx(KernelDescBuilder::new(t).bias(true)).unwrap(), plain);
    let e = KernelDescBuilder::new(t).activation(Activation::GegluTanh).build().unwrap_err();
    assert!(e.to_string().contains("activation"), "{e}");
}

/// Hopper's Fast recipe: its own GEMM1 (`_fast`) with MUFU `ex2`/`rcp` in the activation for
/// bf16 and FP8 activations, every activation; NVFP4 activations refuse it by name.
#[test]
fn the_fast_recipe_on_hopper_is_its_own_gemm1_or_refused() {
    use moegen_dsl::Activation;
    use moegen_dsl::ActivationFormat as A;
    let t = GemmTactic::new_sm90(GemmKind::Gemm1, 64, 128).unwrap();
    for (acts, format) in [(A::Bf16, WeightFormat::Nvfp4), (A::Fp8, WeightFormat::Mxfp4)] {
        for a in [Activation::Swiglu, Activation::SwigluClamped, Activation::GegluTanh] {
            let b = || {
                KernelDescBuilder::new(t)
                    .target(Target::Sm90a)
                    .format(format)
                    .activations(acts)
                    .activation(a)
            };
            let exact = ptx(b()).unwrap();
            let d = b().recipe(EpilogueRecipe::Fast).build().unwrap();
            assert!(d.key().name().contains("_fast"), "{}", d.key().name());
            assert_eq!(d.key().desc().unwrap(), d);
            let fast = ptx(b().recipe(EpilogueRecipe::Fast)).unwrap();
            assert!(!exact.contains("ex2.approx"), "{acts:?} {a:?}: Exact uses MUFU");
            assert!(fast.contains("ex2.approx.ftz.f32"), "{acts:?} {a:?}: Fast has no ex2");
            assert!(fast.contains("rcp.approx.ftz.f32"), "{acts:?} {a:?}: Fast has no rcp");
            // Exact's IEEE division (silu's g / (1 + e)) is gone.
            assert!(exact.contains("div.rn.f32") && !fast.contains("div.rn.f32"), "{a:?}");
        }
    }
    let e = KernelDescBuilder::new(t)
        .target(Target::Sm90a)
        .activations(A::Nvfp4)
        .recipe(EpilogueRecipe::Fast)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("Fast epilogue recipe"), "{e}");
    // GEMM2 has no recipe to choose on Hopper either.
    let t2 = GemmTactic::new_sm90(GemmKind::Gemm2, 64, 128).unwrap();
    let e = KernelDescBuilder::new(t2)
        .target(Target::Sm90a)
        .activations(A::Bf16)
        .recipe(EpilogueRecipe::Fast)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("recipe"), "{e}");
}
