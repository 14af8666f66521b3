// build.rs: generates the kernels this crate runs (the eight NVFP4 tactics with 128-row
// routing tiles, both finalize modes, the SIMT kernels for sm_100) into OUT_DIR, with the
// cargo::rerun-if-* lines, touching only files whose bytes change; src/lib.rs includes them.

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
