//! MXFP8 activations of the SM100 MXFP8 × MXFP4 layer in the kernels' layout
//! (docs/reference.md, "SM100 MXFP8 × MXFP4"): E4M3 codes with row stride H and linear
//! UE8M0 scales per 32, one row of Kp(H)/32 per token (the padding TMA type of the weights
//! fixes K's padding to 128 for both operands).

use moegen_dsl::formats::{MXFP8_BLOCK, quantize_mxfp8_block};
use moegen_dsl::plan::PlanError;

use super::sm100_mx::{mul, mx_padded_k};
use crate::error::{Result, RuntimeError, check_len};

/// An activation row of whole 32-blocks (the arithmetic reads no partial block).
fn check_width(hidden: usize) -> Result<()> {
    if hidden == 0 {
        return Err(PlanError::Zero { what: "MXFP8 activation width" }.into());
    }
    if !hidden.is_multiple_of(MXFP8_BLOCK) {
        return Err(PlanError::Alignment {
            what: "MXFP8 activation width",
            value: hidden as u64,
            multiple: MXFP8_BLOCK as u64,
            why: " (one scale per 32 values, no partial block)",
        }
        .into());
    }
    Ok(())
}

/// MXFP8 activations `[tokens, H]`: E4M3 codes with row stride H, and per token
/// `Kp(H) / 32` UE8M0 codes, row-major, those of blocks past H zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Mxfp8Activations {
    /// Tokens.
    pub tokens: usize,
    /// H.
    pub hidden: usize,
    /// `[tokens, H]` E4M3 codes.
    pub codes: Vec<u8>,
    /// `[tokens, Kp(H)/32]` UE8M0 codes.
    pub scales: Vec<u8>,
}

impl Mxfp8Activations {
    /// Scale codes per token: Kp(H) / 32.
    pub fn scale_cols(&self) -> Result<usize> {
        Ok(mx_padded_k(self.hidden)? / MXFP8_BLOCK)
    }

    /// Checks the lengths, H in whole 32-blocks and zero scale bytes past H. Codes are not
    /// checked: NaN codes and scales are data (the dot turns them into NaN, as the MMA).
    pub fn validate(&self) -> Result<()> {
        check_width(self.hidden)?;
        let cols = self.scale_cols()?;
        check_len(
            "MXFP8 activation codes",
            self.codes.len(),
            mul("activations", self.tokens, self.hidden)?,
        )?;
        check_len(
            "MXFP8 activation scales",
            self.scales.len(),
            mul("activation scales", self.tokens, cols)?,
        )?;
        let used = self.hidden / MXFP8_BLOCK;
        if self.scales.chunks_exact(cols).any(|row| row[used..].iter().any(|&b| b != 0)) {
            return Err(RuntimeError::UnsupportedActivations {
                what: "MXFP8 activation scales",
                reason: "a scale byte of a block past H (the padding to 128) is not zero",
            });
        }
        Ok(())
    }
}

/// Quantizes `[tokens, hidden]` activations (f32, or bf16 via `Into<f32>`) to MXFP8 with
/// `quantize_mxfp8_block` per 32 values (dsl/src/formats/mxfp8.rs); H must be a multiple of
/// 32. NaN and infinity are quantized as the kernels do (NaN codes, saturated values), not
/// refused.
pub fn quantize_mxfp8_activations<T: Copy + Into<f32>>(
    x: &[T],
    tokens: usize,
    hidden: usize,
) -> Result<Mxfp8Activations> {
    check_width(hidden)?;
    check_len("activations", x.len(), mul("activations", tokens, hidden)?)?;
    let scales = mul("activation scales", tokens, mx_padded_k(hidden)? / MXFP8_BLOCK)?;
    let mut out =
        Mxfp8Activations { tokens, hidden, codes: vec![0; x.len()], scales: vec![0; scales] };
    let cols = out.scale_cols()?;
    for (t, row) in x.chunks_exact(hidden).enumerate() {
        for (c, block) in row.chunks_exact(MXFP8_BLOCK).enumerate() {
            let v: Vec<f32> = block.iter().map(|&v| v.into()).collect();
            let (codes, scale) = quantize_mxfp8_block(&v);
            let at = t * hidden + c * MXFP8_BLOCK;
            out.codes[at..at + MXFP8_BLOCK].copy_from_slice(&codes);
            out.scales[t * cols + c] = scale;
        }
    }
    Ok(out)
}
