// An epilogue's activation is swiglu, swiglu_clamped, geglu_tanh or relu2.
moegen_macros::moe_kernels! {
    pub mod kernels {
        epilogues: [plain, { activation: gelu_erf, gemm1_bias: true }],
    }
}

fn main() {}
