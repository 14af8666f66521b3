// An epilogue's activation is swiglu, swiglu_clamped or geglu_tanh (ReLU² is not generated).
moegen_macros::moe_kernels! {
    pub mod kernels {
        epilogues: [plain, { activation: relu2, gemm1_bias: true }],
    }
}

fn main() {}
