// The keys go inside `mod name { … }`.
moegen_macros::moe_kernels! {
    target: sm_100f,
}

fn main() {}
