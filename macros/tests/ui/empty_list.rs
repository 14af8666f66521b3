// An empty tactic list would generate no GEMM.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [],
    }
}

fn main() {}
