//! A layer's per-expert epilogue data beside its weights: the activation's parameters and
//! the two biases, checked once against the shape. The CPU references read it and
//! `LayerWeights` uploads it (docs/formats.md, "Epilogue data").

use moegen_dsl::epilogue_math::ActivationParams;
use moegen_dsl::plan::MoeShape;
use moegen_dsl::{Activation, EpilogueSpec};

use crate::error::{Result, RuntimeError, check_len};

/// The epilogue functions of a layer and their per-expert data. Build one with
/// [`ExpertEpilogue::new`]; [`ExpertEpilogue::default`] is plain SwiGLU without biases.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExpertEpilogue {
    spec: EpilogueSpec,
    params: Vec<ActivationParams>,
    gemm1_bias: Vec<f32>,
    gemm2_bias: Vec<f32>,
}

impl ExpertEpilogue {
    /// `activation` with its per-expert `params` (one per local expert for activations that
    /// read them, `Activation::has_params`; otherwise none), GEMM1's bias `[L, 2I]` (per
    /// expert the up rows' I values, then the gate rows'; `[L, I]` for an ungated activation,
    /// one per W1 row: `Activation::w1_rows`) and GEMM2's bias `[L, H]`, each
    /// optional. Lengths are checked against `shape`, and every value must be finite.
    pub fn new(
        shape: &MoeShape,
        activation: Activation,
        params: Vec<ActivationParams>,
        gemm1_bias: Option<Vec<f32>>,
        gemm2_bias: Option<Vec<f32>>,
    ) -> Result<Self> {
        let spec = EpilogueSpec {
            activation,
            gemm1_bias: gemm1_bias.is_some(),
            gemm2_bias: gemm2_bias.is_some(),
        };
        let out = Self {
            spec,
            params,
            gemm1_bias: gemm1_bias.unwrap_or_default(),
            gemm2_bias: gemm2_bias.unwrap_or_default(),
        };
        out.validate(shape)?;
        Ok(out)
    }

    /// Checks lengths against `shape` and that every value is finite.
    pub fn validate(&self, shape: &MoeShape) -> Result<()> {
        let (l, h, i) = (shape.local_experts(), shape.hidden, shape.intermediate);
        let want = if self.spec.activation.has_params() { l } else { 0 };
        check_len("activation parameters", self.params.len(), want)?;
        if self.params.iter().any(|p| !(p.alpha.is_finite() && p.beta.is_finite())) {
            return Err(RuntimeError::NonFinite { what: "activation parameters" });
        }
        // A positive limit: zero would clamp every value away (and leave only the sign of
        // zero to min/max).
        if let Some(p) = self.params.iter().find(|p| !(p.limit.is_finite() && p.limit > 0.0)) {
            return Err(RuntimeError::BadScale { what: "activation limit", value: p.limit });
        }
        let lens = [
            ("GEMM1 bias", &self.gemm1_bias, self.spec.gemm1_bias, l * self.w1_rows(i)),
            ("GEMM2 bias", &self.gemm2_bias, self.spec.gemm2_bias, l * h),
        ];
        for (what, v, on, len) in lens {
            check_len(what, v.len(), if on { len } else { 0 })?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(RuntimeError::NonFinite { what });
            }
        }
        Ok(())
    }

    /// The functions: the activation and which GEMMs add a bias.
    pub fn spec(&self) -> EpilogueSpec {
        self.spec
    }
    /// Expert `e`'s activation parameters (unused values for activations without any).
    pub fn params(&self, e: usize) -> ActivationParams {
        self.params.get(e).copied().unwrap_or(ActivationParams {
            alpha: 1.0,
            beta: 0.0,
            limit: 0.0,
        })
    }
    /// W1's rows per expert under this activation (`Activation::w1_rows`).
    pub fn w1_rows(&self, intermediate: usize) -> usize {
        self.spec.activation.w1_rows(intermediate)
    }
    /// Expert `e`'s GEMM1 bias of h column `j`: (up, gate), when there is one. An ungated
    /// activation has one bias per h column: it comes as the up value, the gate one is 0
    /// (never read: `activation_exact` reads one pre-activation).
    pub fn gemm1_bias(&self, shape: &MoeShape, e: usize, j: usize) -> Option<(f32, f32)> {
        let i = shape.intermediate;
        let at = e * self.w1_rows(i) + j;
        let up = *self.gemm1_bias.get(at)?;
        if !self.spec.activation.gated() {
            return Some((up, 0.0));
        }
        Some((up, *self.gemm1_bias.get(at + i)?))
    }
    /// Expert `e`'s GEMM2 bias of output column `c`, when there is one.
    pub fn gemm2_bias(&self, shape: &MoeShape, e: usize, c: usize) -> Option<f32> {
        self.gemm2_bias.get(e * shape.hidden + c).copied()
    }

    /// The device buffers' bytes: the activation parameters as f32 [L, 4] (α, β, limit, 0),
    /// GEMM1's and GEMM2's biases as f32; each empty when the spec has none.
    pub fn device_bytes(&self) -> [Vec<u8>; 3] {
        let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let params: Vec<f32> =
            self.params.iter().flat_map(|p| [p.alpha, p.beta, p.limit, 0.0]).collect();
        [f32s(&params), f32s(&self.gemm1_bias), f32s(&self.gemm2_bias)]
    }
}
