//! The synthetic problem of a layer case: activations, routing, NVFP4 and MXFP4 weights and
//! the f64 oracle, and the CPU reference of each generation on it.

use super::*;
use crate::rng::Rng;
use moegen_dsl::Target;
use moegen_dsl::epilogue_math::ActivationParams;
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::{
    Gemm1Options, Sm90Tiling, Sm100MxWeights, quantize_mxfp8_activations,
    sm90_a8_gemm1_reference_with, sm90_gemm1_reference_with, sm100_mx_gemm1_reference,
    sm100_mx_gemm2_contributions,
};

/// The synthetic problem of a case: data, quantized weights, routing and the oracle.
pub struct Problem {
    /// The case.
    pub case: LayerCase,
    /// `[tokens, H]` bf16 input.
    pub x: Vec<bf16>,
    /// Router output.
    pub routing: Routing,
    /// Static activation global scale (calibrated on `x`).
    pub input_scale: f32,
    /// NVFP4 weights as prepared for SM100 (and Hopper's NVFP4 path).
    pub prepared: PreparedWeights,
    /// MXFP4 codes per local expert: (up, gate, down), each (packed, linear ue8m0 scales).
    pub mxfp4: Vec<[(Vec<u8>, Vec<u8>); 3]>,
    /// The activation's parameters and the biases of the case's epilogue.
    pub epilogue: ExpertEpilogue,
    /// The f64 oracle's output `[tokens, H]`.
    pub oracle: Vec<f64>,
}

/// The case's epilogue data: per expert (α, β, limit) around gpt-oss's (α 1.6–1.8, β 0.5–1.5,
/// limit 1–7: small limits make the clamps bite on these unit-scale values) and biases of
/// magnitude ≤ 0.5 (GEMM1) and ≤ 0.05 (GEMM2, beside outputs of about that size).
fn epilogue(r: &mut Rng, case: LayerCase) -> Result<ExpertEpilogue, LayerCheckError> {
    let s = &case.shape;
    let (l, h, i) = (s.local_experts(), s.hidden, s.intermediate);
    let spec = case.epilogue;
    let mut uniform =
        |lo: f32, hi: f32| lo + (hi - lo) * ((r.next() >> 40) as f32 / (1u64 << 24) as f32);
    let params = if spec.activation.has_params() {
        (0..l)
            .map(|_| ActivationParams {
                alpha: uniform(1.6, 1.8),
                beta: uniform(0.5, 1.5),
                limit: uniform(1.0, 7.0),
            })
            .collect()
    } else {
        Vec::new()
    };
    let rows = spec.activation.w1_rows(i);
    let b1 = spec.gemm1_bias.then(|| (0..l * rows).map(|_| uniform(-0.5, 0.5)).collect());
    let b2 = spec.gemm2_bias.then(|| (0..l * h).map(|_| uniform(-0.05, 0.05)).collect());
    ExpertEpilogue::new(s, spec.activation, params, b1, b2).map_err(|source| {
        LayerCheckError::Reference { case: case.label(), source: Box::new(source) }
    })
}

/// Distinct experts per token following the case's pattern.
fn route(r: &mut Rng, case: LayerCase) -> Result<Vec<i32>, LayerCheckError> {
    let w = &case.shape.window;
    let (e, k, off, l) = (w.num_experts(), w.top_k(), w.offset(), w.local());
    let non_local: Vec<usize> = (0..e).filter(|x| !(off..off + l).contains(x)).collect();
    let allowed: Vec<usize> = match case.routes {
        RoutePattern::Spread => (0..e).collect(),
        RoutePattern::SomeEmpty => {
            (0..e).filter(|x| !(off..off + l).contains(x) || (x - off) % 2 == 0).collect()
        }
        RoutePattern::OneExpert | RoutePattern::NoneLocal => non_local.clone(),
    };
    let first_fixed = case.routes == RoutePattern::OneExpert;
    let free = k - usize::from(first_fixed);
    if allowed.len() < free {
        return Err(LayerCheckError::TooFewExperts { case: case.label() });
    }
    let mut out = Vec::with_capacity(case.tokens * k);
    for _ in 0..case.tokens {
        let mut chosen: Vec<usize> = Vec::with_capacity(k);
        if first_fixed {
            chosen.push(off);
        }
        while chosen.len() < k {
            let c = allowed[(r.next() % allowed.len() as u64) as usize];
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
        out.extend(chosen.iter().map(|&c| c as i32));
    }
    Ok(out)
}

/// The fc2 input scale every case uses (h's static NVFP4 global scale: amax 8).
pub const FC2_INPUT_SCALE: f32 = 448.0 * 6.0 / 8.0;

/// Builds the synthetic problem: normal activations and weights (scaled by 1/√K), routes
/// spread over every expert (some non-local), distinct experts per token.
pub fn problem(case: LayerCase) -> Result<Problem, LayerCheckError> {
    let format = |source| LayerCheckError::Format { case: case.label(), source };
    let reference =
        |source| LayerCheckError::Reference { case: case.label(), source: Box::new(source) };
    let s = &case.shape;
    let (h, i, l, k) = (s.hidden, s.intermediate, s.local_experts(), s.top_k());
    let n = case.tokens;
    let mut r = Rng(case.seed.max(1));
    let x: Vec<bf16> = (0..n * h).map(|_| bf16::from_f32(r.normal())).collect();
    let scale = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..l * i * h).map(|_| r.normal() * scale).collect();
    let gate: Vec<f32> = (0..l * i * h).map(|_| r.normal() * scale).collect();
    let down: Vec<f32> = (0..l * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
    let experts = route(&mut r, case)?;
    let weights = (0..n * k).map(|j| 0.1 + 0.8 * ((j % k + 1) as f32 / k as f32)).collect();
    let routing = Routing { tokens: n, experts, weights };
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    let input_scale = nvfp4_global_scale(block_amax(&xf)).map_err(format)?;
    // An ungated activation (ReLU²) has W1 [L, I, H]: `up` serves as W1, `gate` goes unused.
    let gated = case.epilogue.activation.gated();
    let prepared = if gated {
        prepare_weights(s, &up, &gate, &down, input_scale, FC2_INPUT_SCALE)
    } else {
        prepare_relu2_weights(s, &up, &down, input_scale, FC2_INPUT_SCALE)
    }
    .map_err(reference)?;
    let mx = |v: &[f32], rows, cols| -> Result<(Vec<u8>, Vec<u8>), LayerCheckError> {
        let m = quantize_mxfp4(v, rows, cols, MxScaleRule::NoClip).map_err(format)?;
        Ok((m.packed, m.scales))
    };
    let mut mxfp4 = Vec::with_capacity(l);
    if case.format == WeightFormat::Mxfp4 {
        let per = i * h;
        for ex in 0..l {
            let sl = ex * per..(ex + 1) * per;
            mxfp4.push([
                mx(&up[sl.clone()], i, h)?,
                mx(&gate[sl.clone()], i, h)?,
                mx(&down[sl], h, i)?,
            ]);
        }
    }
    let epilogue = epilogue(&mut r, case)?;
    let prepared = prepared.with_epilogue(s, epilogue.clone()).map_err(reference)?;
    let gate: &[f32] = if gated { &gate } else { &[] };
    let oracle =
        oracle_moe_epilogue(s, &xf, &up, gate, &down, &routing, &epilogue).map_err(reference)?;
    Ok(Problem { case, x, routing, input_scale, prepared, mxfp4, epilogue, oracle })
}

impl Problem {
    /// The case's weights in the Hopper layout for its activation format.
    pub fn sm90_weights(&self) -> Result<Sm90Weights, LayerCheckError> {
        let c = &self.case;
        match c.format {
            WeightFormat::Nvfp4 => {
                Sm90Weights::from_prepared(&c.shape, &self.prepared, c.activations)
            }
            WeightFormat::Mxfp4 => {
                fn t(m: &(Vec<u8>, Vec<u8>)) -> Mxfp4Tensor<'_> {
                    Mxfp4Tensor { packed: &m.0, scales: &m.1, layout: CheckpointScales::Linear }
                }
                if !c.epilogue.activation.gated() {
                    // ReLU²: the up codes serve as W1 [I, H] (as `prepare_relu2_weights`).
                    let experts: Vec<_> = self.mxfp4.iter().map(|[u, _, d]| (t(u), t(d))).collect();
                    Sm90Weights::from_mxfp4_relu2(
                        &c.shape,
                        &experts,
                        c.activations,
                        self.input_scale,
                        FC2_INPUT_SCALE,
                    )
                } else {
                    let experts: Vec<_> = self
                        .mxfp4
                        .iter()
                        .map(|[u, g, d]| ExpertTensors { up: t(u), gate: t(g), down: t(d) })
                        .collect();
                    Sm90Weights::from_mxfp4(
                        &c.shape,
                        &experts,
                        c.activations,
                        self.input_scale,
                        FC2_INPUT_SCALE,
                    )
                }
            }
        }
        .and_then(|w| w.with_epilogue(&c.shape, self.epilogue.clone()))
        .map_err(|source| LayerCheckError::Reference { case: c.label(), source: Box::new(source) })
    }

    /// The case's MXFP4 weights in the SM100 MXFP8 × MXFP4 layout (α 1: MXFP4 has no global
    /// scale), with the case's epilogue.
    pub fn sm100_mx_weights(&self) -> Result<Sm100MxWeights, LayerCheckError> {
        let c = &self.case;
        fn t(m: &(Vec<u8>, Vec<u8>)) -> Mxfp4Tensor<'_> {
            Mxfp4Tensor { packed: &m.0, scales: &m.1, layout: CheckpointScales::Linear }
        }
        if c.format != WeightFormat::Mxfp4 || c.activations != ActivationFormat::Mxfp8 {
            return Err(LayerCheckError::Sm100Format { case: c.label() });
        }
        let w = if c.epilogue.activation.gated() {
            let experts: Vec<_> = self
                .mxfp4
                .iter()
                .map(|[u, g, d]| ExpertTensors { up: t(u), gate: t(g), down: t(d) })
                .collect();
            Sm100MxWeights::from_mxfp4(&c.shape, &experts)
        } else {
            // ReLU²: the up codes serve as W1 [I, H] (as `prepare_relu2_weights`).
            let experts: Vec<_> = self.mxfp4.iter().map(|[u, _, d]| (t(u), t(d))).collect();
            Sm100MxWeights::from_mxfp4_relu2(&c.shape, &experts)
        };
        w.and_then(|w| w.with_epilogue(&c.shape, self.epilogue.clone())).map_err(|source| {
            LayerCheckError::Reference { case: c.label(), source: Box::new(source) }
        })
    }

    /// The case's MXFP4 weights prepared for FP8 activations (A8).
    pub fn sm90_a8_weights(&self) -> Result<Sm90A8Weights, LayerCheckError> {
        let c = &self.case;
        Sm90A8Weights::from_sm90(&c.shape, &self.sm90_weights()?).map_err(|source| {
            LayerCheckError::Reference { case: c.label(), source: Box::new(source) }
        })
    }

    /// The CPU reference of `arch`'s arithmetic for a tactic of tiling `tiling`: its routing
    /// tile and, on Hopper, its GEMMs' K splits (`Sm90Tiling::of(&tactic)`; a tile alone,
    /// `tile.into()`, is an unsplit tactic's). SM100 tactics never split K: a split tiling
    /// with [`Arch::Sm100`] is refused.
    pub fn reference(&self, arch: Arch, tiling: Sm90Tiling) -> Result<Vec<bf16>, LayerCheckError> {
        self.reference_and_contributions(arch, tiling).map(|(out, _)| out)
    }

    /// The reference output and each route's GEMM2 contribution `[N·k, H]` (what the
    /// finalize sums; the bulk reduce's bound is in terms of it), for a tactic of tiling
    /// `tiling` ([`Self::reference`]).
    pub fn reference_and_contributions(
        &self,
        arch: Arch,
        tiling: Sm90Tiling,
    ) -> Result<(Vec<bf16>, Vec<f32>), LayerCheckError> {
        let c = &self.case;
        let (s, r) = (&c.shape, &self.routing);
        let e = |source| LayerCheckError::Reference { case: c.label(), source: Box::new(source) };
        if arch == Arch::Sm100 && tiling != Sm90Tiling::unsplit(tiling.tile) {
            let split = tiling.gemm1.max(tiling.gemm2).get();
            return Err(e(RuntimeError::UnsupportedSplitK { split }));
        }
        let (split1, split2) = (tiling.gemm1, tiling.gemm2);
        let sort = moe_sort(&r.experts, r.tokens, &s.window, tiling.tile).map_err(e)?;
        let contrib = match arch {
            Arch::Sm100 if c.activations == ActivationFormat::Mxfp8 => {
                let w = self.sm100_mx_weights()?;
                let acts = quantize_mxfp8_activations(&self.x, c.tokens, s.hidden).map_err(e)?;
                let recipe = c.recipe.unwrap_or(Target::Sm100f.default_recipe());
                let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe };
                let h = sm100_mx_gemm1_reference(s, &acts, &w, &sort, opts).map_err(e)?;
                sm100_mx_gemm2_contributions(s, &h, &w, &sort, r).map_err(e)?
            }
            Arch::Sm100 => {
                if c.format != WeightFormat::Nvfp4 || c.activations != ActivationFormat::Nvfp4 {
                    return Err(LayerCheckError::Sm100Format { case: c.label() });
                }
                let xf: Vec<f32> = self.x.iter().map(|v| v.to_f32()).collect();
                let acts =
                    quantize_activations(&xf, c.tokens, s.hidden, self.input_scale).map_err(e)?;
                let recipe = c.recipe.unwrap_or(Target::Sm100f.default_recipe());
                let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe };
                let h = gemm1_reference(s, &acts, &self.prepared, &sort, opts).map_err(e)?;
                gemm2_contributions(s, &h, &self.prepared, &sort, r).map_err(e)?
            }
            Arch::Sm90 if c.activations == ActivationFormat::Fp8 => {
                let w = self.sm90_a8_weights()?;
                let recipe = c.recipe.unwrap_or(Target::Sm90a.default_recipe());
                let h = sm90_a8_gemm1_reference_with(s, &self.x, &w, &sort, recipe, split1)
                    .map_err(e)?;
                sm90_a8_gemm2_contributions(s, &h, &w, &sort, r, split2).map_err(e)?
            }
            Arch::Sm90 => {
                let w = self.sm90_weights()?;
                let acts =
                    sm90_activations(&self.x, c.tokens, s.hidden, c.activations, self.input_scale)
                        .map_err(e)?;
                let recipe = c.recipe.unwrap_or(Target::Sm90a.default_recipe());
                let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe };
                let h = sm90_gemm1_reference_with(s, &acts, &w, &sort, opts, split1).map_err(e)?;
                sm90_gemm2_contributions(s, &h, &w, &sort, r, split2).map_err(e)?
            }
        };
        let out = finalize(&contrib, c.tokens, s.top_k(), s.hidden, c.finalize).map_err(e)?;
        Ok((out, contrib))
    }
}
