//! One kernel identity: a description's key names it exactly (the key rebuilds the same
//! description, and everything the description tells is the key's), and a key whose parts
//! do not name one kernel is refused.

use std::collections::BTreeSet;

use moegen_dsl::abi::{GemmKey, WeightFormat};
use moegen_dsl::kernel_desc::Epilogue;
use moegen_dsl::*;

/// Every description the builder accepts over both generations' tactics and all options,
/// with one overridden depth per GEMM so `planned_depths: false` keys are covered.
fn every_desc() -> Vec<KernelDesc> {
    let mut out = Vec::new();
    let gemms = |ts: Vec<MoeTactic>| -> Vec<GemmTactic> {
        ts.iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect()
    };
    let sm100 = gemms(nvfp4_tactics()).into_iter().flat_map(|g| {
        [Target::Sm100f, Target::Sm100a]
            .map(|t| (g, t, WeightFormat::Nvfp4, ActivationFormat::Nvfp4))
    });
    let sm90 = gemms(sm90_tactics()).into_iter().flat_map(|g| {
        [
            (WeightFormat::Nvfp4, ActivationFormat::Nvfp4),
            (WeightFormat::Nvfp4, ActivationFormat::Bf16),
            (WeightFormat::Mxfp4, ActivationFormat::Bf16),
        ]
        .map(|(f, a)| (g, Target::Sm90a, f, a))
    });
    for (g, target, format, act) in sm100.chain(sm90) {
        let base = KernelDescBuilder::new(g).target(target).format(format).activations(act);
        let mut variants = Vec::new();
        match g.kind() {
            GemmKind::Gemm1 => {
                for s in [SwigluInput::F32, SwigluInput::Bf16] {
                    for r in [EpilogueRecipe::Exact, EpilogueRecipe::Fast] {
                        variants.push(base.clone().swiglu_input(s).recipe(r));
                    }
                }
            }
            GemmKind::Gemm2 => {
                for m in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
                    variants.push(base.clone().finalize(m));
                }
            }
        }
        variants.push(base.depths(2, 1));
        for d in variants.into_iter().filter_map(|b| b.build().ok()) {
            if !out.iter().any(|o: &KernelDesc| o.key() == d.key()) {
                out.push(d);
            }
        }
    }
    out
}

#[test]
fn a_description_is_its_key() {
    let descs = every_desc();
    assert!(descs.len() > 150, "only {} descriptions built", descs.len());
    let mut names = BTreeSet::new();
    for d in &descs {
        let k = d.key();
        assert_eq!(k.desc().as_ref(), Ok(d), "{} does not rebuild its description", k.name());
        assert_eq!(k.tactic(), Ok(d.tactic()), "{}", k.name());
        assert_eq!(k.target, d.target());
        assert_eq!(k.activations, d.activations());
        assert_eq!((k.ab_stages, k.acc_stages), (d.budget().ab_stages, d.budget().acc_stages));
        assert_eq!(d.a().format, k.format);
        assert_eq!(d.b().format, k.format);
        match (k.gemm, d.epilogue()) {
            (GemmKind::Gemm1, Epilogue::SwigluRequant { output, swiglu_input, recipe }) => {
                assert_eq!((output, swiglu_input, recipe), (k.format, k.swiglu_input, k.recipe));
                assert_eq!(k.finalize, FinalizeMode::default(), "{}", k.name());
            }
            (GemmKind::Gemm2, Epilogue::Finalize { mode }) => {
                assert_eq!(mode, k.finalize);
                assert_eq!(k.swiglu_input, SwigluInput::default(), "{}", k.name());
                assert_eq!(k.recipe, k.target.default_recipe(), "{}", k.name());
            }
            (g, e) => panic!("{} is {g} with epilogue {e:?}", k.name()),
        }
        // The entry name tells every (distinct) key apart.
        assert!(names.insert(k.name()), "two keys named {}", k.name());
    }
}

#[test]
fn a_key_that_names_no_kernel_is_refused() {
    let d = KernelDescBuilder::new(*nvfp4_tactics()[0].gemm1()).build().unwrap();
    let k = d.key();
    let not_a_kernel = |bad: GemmKey| match bad.desc() {
        Err(DescError::NotAKernel { given, built }) => {
            assert_eq!(given, bad);
            assert_ne!(built, bad);
        }
        other => panic!("{bad:?} gave {other:?}"),
    };
    // Stage counts that are not the plan's while claiming to be planned.
    not_a_kernel(GemmKey { ab_stages: k.ab_stages - 1, ..k });
    // The plan's own stage counts claimed as an override.
    not_a_kernel(GemmKey { planned_depths: false, ..k });
    // GEMM2's option on GEMM1.
    not_a_kernel(GemmKey { finalize: FinalizeMode::Deterministic, ..k });
    // GEMM1's options on GEMM2.
    let g2 = KernelDescBuilder::new(*nvfp4_tactics()[0].gemm2()).build().unwrap().key();
    not_a_kernel(GemmKey { swiglu_input: SwigluInput::Bf16, ..g2 });
    not_a_kernel(GemmKey { recipe: EpilogueRecipe::Exact, ..g2 });
    // A cluster a Hopper tactic cannot have.
    let h = KernelDescBuilder::new(*sm90_tactics()[0].gemm2())
        .target(Target::Sm90a)
        .build()
        .unwrap()
        .key();
    not_a_kernel(GemmKey { cluster_n: 2, ..h });
    // A K split no tactic has, and any split on SM100: the tactic's own refusal.
    for bad in [GemmKey { split_k: 3, ..h }, GemmKey { split_k: 2, ..k }] {
        let refused = bad.desc();
        assert!(
            matches!(refused, Err(DescError::Tactic(TacticError::UnsupportedSplitK { split, .. }))
                if split == bad.split_k),
            "{bad:?} gave {refused:?}"
        );
    }
    // What the builder refuses, the key refuses with the builder's error.
    let mx = GemmKey { format: WeightFormat::Mxfp4, ..k };
    assert!(matches!(mx.desc(), Err(DescError::Unsupported { .. })), "{:?}", mx.desc());
}
