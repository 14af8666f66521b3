//! moegen-macros: `moe_kernels!`, a moegen kernel set declared in Rust syntax and generated
//! while the crate compiles. It expands into the same typed module the build-script route
//! (`moegen_codegen::builder::Builder` + `moegen_dsl::include_kernels!()`) writes, with the
//! PTX inline, and turns every description the DSL refuses into a compile error on the token
//! responsible. docs/macro.md describes the syntax completely.

mod expand;
mod fields;
mod set_spec;
mod spec;
mod value;

use proc_macro::TokenStream;

/// Declares a kernel set and expands into a module of typed
/// `moegen_dsl::abi::KernelInfo` values: `KERNELS`, `kernels()`, `kernel(name)`, `find(id)`
/// and `MANIFEST_JSON`. The crate using it also depends on `moegen-dsl`.
///
/// ```
/// moegen_macros::moe_kernels! {
///     /// The kernels this engine ships.
///     pub mod kernels {
///         target: sm_100f,                  // or sm_100a
///         format: nvfp4,                    // or mxfp4 (MXFP8 activations, kind::mxf8f6f4)
///         tactics: [
///             {
///                 tile: 128,
///                 gemm1: { mma: [128, 256], cluster: [1, 1] },
///                 gemm2: { mma: [128, 256], cluster: [1, 2], ab_stages: 3, acc_stages: 1 },
///             },
///         ],
///         finalize: [bulk_reduce_add, deterministic],
///         swiglu_input: f32,                // or bf16
///         recipes: [fast],                  // GEMM1 epilogue recipes: fast, exact
///         epilogues: [plain],               // or gpt_oss, or { activation: geglu_tanh, gemm1_bias: true }
///         simt: [sm_100f, sm_90a],
///     }
/// }
///
/// // 1 GEMM1, 2 GEMM2 (one per finalize mode), 10 SIMT kernels for sm_100f (its MXFP8
/// // quantizer among them), 12 for sm_90a (its A4 quantize-dequantize and the two A8
/// // activation quantizers too).
/// assert_eq!(kernels::KERNELS.len(), 1 + 2 + 10 + 12);
/// ```
///
/// Every key is optional except `tile`, `gemm1`, `gemm2`, `mma` and `cluster` inside a
/// tactic; left out, `tactics` is all 16 NVFP4 tactics, `finalize` is
/// `[bulk_reduce_add]` and `simt` is `[sm_100f]`, as for the `Builder`.
#[proc_macro]
pub fn moe_kernels(input: TokenStream) -> TokenStream {
    expand::expand(input.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}
