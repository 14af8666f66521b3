//! `moe_kernels!` as a user meets it: one valid declaration that compiles and runs, and one
//! refused declaration per error class, each pinned to its message and the token it marks.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/every_key.rs");
    t.compile_fail("tests/ui/*.rs");
}
