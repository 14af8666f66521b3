//! Generates the kernels this crate runs: the eight NVFP4 tactics with 128-row routing
//! tiles, both finalize modes, and the SIMT kernels for sm_100. The module lands in
//! `OUT_DIR`; `moegen_dsl::include_kernels!()` includes it.

use moegen_codegen::builder::Builder;
use moegen_dsl::FinalizeMode;

fn main() {
    let emitted = Builder::new()
        .tile_sizes(&[128])
        .finalize_modes([FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic])
        .emit();
    if let Err(e) = emitted {
        // A refused description fails the build with the DSL's message.
        eprintln!("moegen: {e}");
        std::process::exit(1);
    }
}
