//! A declaration turned into codegen's `KernelSetSpec`, with every kernel description
//! checked by the same `gemm_descs` that generation uses (and so by
//! `KernelDescBuilder::build` and the resource model). A refusal is placed on the option
//! that causes it: the first written option which, set back to its default alone, changes
//! the DSL's answer.

use proc_macro2::Span;
use syn::Error;

use moegen_codegen::kernel_set::{DepthOverride, KernelSetSpec, gemm_descs};
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{GemmTactic, MoeTactic, Raster, SwigluInput};

use crate::spec::{Declared, TacticDecl, refuse_depth_conflicts};

/// The spec of a declaration, every description already built once without error.
pub fn kernel_set_spec(d: &Declared) -> syn::Result<KernelSetSpec> {
    refuse_depth_conflicts(d)?;
    let spec = spec_of(d, d.tactics.iter().map(|t| t.tactic), depth_overrides(d, &d.tactics)?);
    if gemm_descs(&spec).is_ok() {
        return Ok(spec);
    }
    for t in &d.tactics {
        let one = spec_of(d, [t.tactic], depth_overrides(d, std::slice::from_ref(t))?);
        if let Err(e) = gemm_descs(&one) {
            return Err(Error::new(blame(d, t, &one), e));
        }
    }
    // Each tactic builds alone, so no single token is to blame.
    Err(Error::new(Span::call_site(), "the kernel set's descriptions do not build together"))
}

fn spec_of(
    d: &Declared,
    tactics: impl IntoIterator<Item = MoeTactic>,
    depths: Vec<DepthOverride>,
) -> KernelSetSpec {
    KernelSetSpec {
        target: d.target.value,
        formats: vec![d.format.value],
        tactics: tactics.into_iter().collect(),
        finalize: d.finalize.iter().map(|f| f.value).collect(),
        swiglu_input: d.swiglu_input.value,
        epilogues: d.epilogues.clone(),
        recipes: d.recipes.clone(),
        depths,
        simt: d.simt.clone(),
        sm90: Vec::new(),
        corpus: false,
    }
}

/// One override per GEMM tactic that writes a depth (conflicts were refused before).
fn depth_overrides(d: &Declared, tactics: &[TacticDecl]) -> syn::Result<Vec<DepthOverride>> {
    let mut out: Vec<DepthOverride> = Vec::new();
    for g in tactics.iter().flat_map(|t| &t.gemms).filter(|g| g.overrides_depths()) {
        let (ab_stages, acc_stages) = g.depths(d.target.value, d.format.value)?;
        if !out.iter().any(|o| o.gemm == g.tactic) {
            out.push(DepthOverride { gemm: g.tactic, ab_stages, acc_stages });
        }
    }
    Ok(out)
}

/// The token responsible for `spec` (holding tactic `t` alone) being refused.
fn blame(d: &Declared, t: &TacticDecl, spec: &KernelSetSpec) -> Span {
    let answer = |s: &KernelSetSpec| gemm_descs(s).err().map(|e| e.to_string());
    let refused = answer(spec);
    let mut probes: Vec<(Span, KernelSetSpec)> = Vec::new();
    if let Some(span) = d.format.span {
        probes.push((span, KernelSetSpec { formats: vec![WeightFormat::Nvfp4], ..spec.clone() }));
    }
    for (i, g) in t.gemms.iter().enumerate() {
        if let (Some(span), Some(probe)) = (g.raster, along_n(t, i, spec)) {
            probes.push((span, probe));
        }
        let planned = crate::spec::planned(d.target.value, &g.tactic, d.format.value).ok();
        for (written, is_ab) in [(g.ab_stages, true), (g.acc_stages, false)] {
            let (Some((_, span)), Some(planned)) = (written, planned) else { continue };
            let depths = spec
                .depths
                .iter()
                .map(|o| match (o.gemm == g.tactic, is_ab) {
                    (true, true) => DepthOverride { ab_stages: planned.ab_stages, ..*o },
                    (true, false) => DepthOverride { acc_stages: planned.acc_stages, ..*o },
                    (false, _) => *o,
                })
                .collect();
            probes.push((span, KernelSetSpec { depths, ..spec.clone() }));
        }
    }
    if let Some(span) = d.swiglu_input.span {
        probes.push((span, KernelSetSpec { swiglu_input: SwigluInput::default(), ..spec.clone() }));
    }
    for (i, f) in d.finalize.iter().enumerate() {
        if let Some(span) = f.span {
            let mut finalize = spec.finalize.clone();
            finalize.remove(i);
            probes.push((span, KernelSetSpec { finalize, ..spec.clone() }));
        }
    }
    probes.into_iter().find(|(_, p)| answer(p) != refused).map_or(t.span, |(span, _)| span)
}

/// `spec` with GEMM `i` of tactic `t` walking N fastest (its depth override follows it).
fn along_n(t: &TacticDecl, i: usize, spec: &KernelSetSpec) -> Option<KernelSetSpec> {
    let g = t.gemms[i].tactic;
    let along_n = GemmTactic::new(g.kind(), g.mma_tiler(), g.cluster(), Raster::AlongN).ok()?;
    let mut gemms = [*t.tactic.gemm1(), *t.tactic.gemm2()];
    gemms[i] = along_n;
    let tactic = MoeTactic::new(t.tactic.tile(), gemms[0], gemms[1]).ok()?;
    let depths = spec
        .depths
        .iter()
        .map(|o| if o.gemm == g { DepthOverride { gemm: along_n, ..*o } } else { *o })
        .collect();
    Some(KernelSetSpec { tactics: vec![tactic], depths, ..spec.clone() })
}
