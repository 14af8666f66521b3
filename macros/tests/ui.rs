//! `moe_kernels!` as a user meets it: valid declarations that compile and run, and one
//! refused declaration per error class, each pinned to its message and the token it marks.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/every_key.rs");
    t.pass("tests/ui/pass/relu2.rs");
    t.pass("tests/ui/pass/mxfp4.rs");
    t.compile_fail("tests/ui/*.rs");
}
