//! What the Hopper A16/A4 kernels read of `Sm90Weights` beyond the weights themselves: MXFP4
//! scale bytes as the bf16 exponent fields of the kernels' factors, and α with each matrix's
//! shift 2^ρ (docs/reference.md, "Hopper MXFP4 weights: the per-matrix shift").

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::{mxfp4_kernel_weight, mxfp4_scale_field, mxfp4_shift};
use moegen_dsl::formats::{e2m1_to_f32, nibble_at};
use moegen_dsl::plan::MoeShape;

use super::sm90::Sm90Weights;
use crate::error::{Result, RuntimeError, check_len};

/// What the Hopper kernels read of one matrix kind (W1 or W2), every expert: the scale
/// bytes as stored (NVFP4: the UE4M3 codes; MXFP4: the factors' bf16 exponent fields,
/// `abi::sm90_weights::mxfp4_scale_field`) and each expert's shift ρ (0 for NVFP4).
pub(super) struct KernelScales {
    pub(super) bytes: Vec<u8>,
    pub(super) shifts: Vec<u8>,
}

impl Sm90Weights {
    /// One matrix kind's scales as the kernels read them (`what` names it in errors): the
    /// per-16 `scales` and packed E2M1 `values` of `experts` experts, `per_expert` scale
    /// codes each.
    fn kernel_scales_of(
        &self,
        what: &'static str,
        scales: &[u8],
        values: &[u8],
        experts: usize,
        per_expert: usize,
    ) -> Result<KernelScales> {
        check_len(what, scales.len(), experts * per_expert)?;
        if self.format == WeightFormat::Nvfp4 || per_expert == 0 {
            return Ok(KernelScales { bytes: scales.to_vec(), shifts: vec![0; experts] });
        }
        let mut out = KernelScales { bytes: Vec::with_capacity(scales.len()), shifts: Vec::new() };
        for (expert, block_codes) in scales.chunks_exact(per_expert).enumerate() {
            let max = block_codes.iter().copied().max().unwrap_or(0);
            let shift = mxfp4_shift(max);
            for (b, &code) in block_codes.iter().enumerate() {
                let offset = expert * per_expert + b;
                let refused =
                    RuntimeError::Mxfp4ScaleSpan { what, expert, offset, code, max, shift };
                // Codes the runtime accepts (at most 252) keep the field at 2 or above.
                let Some(field) = mxfp4_scale_field(code, shift) else {
                    return Err(refused);
                };
                // From field 121 up every E2M1 value times the factor is a bf16 (the least,
                // 0.5 · 2^(121 − 253), is bf16's least subnormal): nothing to check. Below,
                // each value must still come out exact (zeros always do).
                if field < 121 {
                    let exact = (0..16)
                        .map(|v| nibble_at(values, offset * 16 + v).unwrap_or(0))
                        .map(|c| mxfp4_kernel_weight(f64::from(e2m1_to_f32(c)), field))
                        .all(|v| f64::from(bf16::from_f64(v)) == v);
                    if !exact {
                        return Err(refused);
                    }
                }
                out.bytes.push(field);
            }
            out.shifts.push(shift);
        }
        Ok(out)
    }

    /// W1's and W2's scales as the kernels read them.
    pub(super) fn kernel_scales(&self, shape: &MoeShape) -> Result<[KernelScales; 2]> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let rows = self.epilogue.w1_rows(i);
        let l = shape.local_experts();
        Ok([
            self.kernel_scales_of("W1 scales", &self.w1_scales, &self.w1, l, rows * h / 16)?,
            self.kernel_scales_of("W2 scales", &self.w2_scales, &self.w2, l, h * i / 16)?,
        ])
    }

    /// α1 and α2 as the kernels take them: each expert's α times 2^ρ of its matrix (MXFP4
    /// matrices with scales above 2 are shifted by 2^−ρ; `abi::sm90_weights`). Equal to
    /// [`Self::alpha1`] and [`Self::alpha2`] for every matrix whose scale codes are at most
    /// 128, which covers checkpoints (weights up to 12).
    pub fn kernel_alphas(&self, shape: &MoeShape) -> Result<(Vec<f32>, Vec<f32>)> {
        self.validate(shape)?;
        let (_, a1, a2) = self.kernel_form(shape)?;
        Ok((a1, a2))
    }

    /// The scales and α the kernels read ([`Self::kernel_scales`], [`Self::kernel_alphas`]).
    pub(super) fn kernel_form(
        &self,
        shape: &MoeShape,
    ) -> Result<([KernelScales; 2], Vec<f32>, Vec<f32>)> {
        let [s1, s2] = self.kernel_scales(shape)?;
        let times = |what, alpha: &[f32], shifts: &[u8]| -> Result<Vec<f32>> {
            check_len(what, alpha.len(), shifts.len())?;
            let out: Vec<f32> =
                alpha.iter().zip(shifts).map(|(&a, &s)| a * (2f32).powi(i32::from(s))).collect();
            if out.iter().any(|a| !a.is_finite()) {
                return Err(RuntimeError::NonFinite { what });
            }
            Ok(out)
        };
        let a1 = times("alpha1 times 2^rho of its MXFP4 W1", &self.alpha1, &s1.shifts)?;
        let a2 = times("alpha2 times 2^rho of its MXFP4 W2", &self.alpha2, &s2.shifts)?;
        Ok(([s1, s2], a1, a2))
    }
}
