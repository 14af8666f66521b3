//! docs/role-stats.json describes the generated kernels: every SM100 GEMM kernel of the
//! default set is in it, measured on the PTX it has now (checked by the PTX's checksum).
//! Regenerate with `cargo run --release -p moegen-validation --bin role-stats`.

use moegen_codegen::perf::role_stats::RoleStatsFile;
use moegen_validation::role_stats::stale_kernels;

#[test]
fn committed_role_stats_describe_the_current_kernels() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/role-stats.json");
    let text = std::fs::read_to_string(path).expect("docs/role-stats.json");
    let file: RoleStatsFile = serde_json::from_str(&text).expect("role-stats schema");
    let stale = stale_kernels(&file);
    assert!(
        stale.is_empty(),
        "docs/role-stats.json is stale for {stale:?}: run \
         `cargo run --release -p moegen-validation --bin role-stats`"
    );
    for k in &file.kernels {
        assert!(!k.roles.is_empty(), "{}: no roles", k.kernel);
    }
}
