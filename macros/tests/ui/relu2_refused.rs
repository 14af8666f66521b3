// ReLU² is a known activation, but no GEMM1 kernel computes it yet (ungated: W1 has I rows):
// the DSL refuses it and the error points at the activation.
moegen_macros::moe_kernels! {
    pub mod kernels {
        epilogues: [plain, { activation: relu2 }],
    }
}

fn main() {}
