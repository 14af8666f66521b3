//! The build-script route: a downstream crate's `build.rs` describes the kernels it wants and
//! [`Builder::emit`] writes their PTX and a Rust module of typed `KernelInfo` values into
//! `OUT_DIR` (only files whose bytes change), which `moegen_dsl::include_kernels!()`
//! includes. No CUDA toolkit, Python or network is involved: generation is pure Rust and
//! takes milliseconds.
//!
//! In `build.rs`, `main` calls:
//!
//! ```no_run
//! moegen_codegen::builder::Builder::new().tile_sizes(&[128]).emit().expect("moegen kernels");
//! ```

use std::path::{Path, PathBuf};

use moegen_dsl::abi::SimtTarget;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{
    Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, GemmTactic, MoeTactic, SwigluInput, Target,
    TileSize, nvfp4_tactics,
};

use crate::emit::{EmitError, TextSource, manifest_json, render_items, write_if_changed};
use crate::kernel_set::{DepthOverride, GenerateError, KernelSetSpec, build_set};

/// The module file `include_kernels!()` includes.
pub const MODULE_FILE: &str = "moegen_kernels.rs";

/// A build-script failure.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A description the DSL refused.
    #[error(transparent)]
    Generate(#[from] GenerateError),
    /// `OUT_DIR` is not set (not running under cargo) and no folder was given.
    #[error("OUT_DIR is not set: call Builder::out_dir outside a build script")]
    NoOutDir,
    /// Rendering or writing the module failed.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// An option given an empty list (`tactics`, `tile_sizes` or `finalize_modes`).
    #[error(
        "{option}: the list is empty; name at least one, or leave {option} out for the default"
    )]
    Empty {
        /// The builder method.
        option: &'static str,
    },
    /// A tile size that is not one of the target's.
    #[error("tile_sizes: {rows} is not one of {target}'s tile sizes {}", rows_list(allowed))]
    TileSize {
        /// The rows given.
        rows: u32,
        /// The target the kernels are built for.
        target: Target,
        /// The target's tile sizes.
        allowed: Vec<u32>,
    },
    /// A tile size none of the selected tactics has.
    #[error(
        "tile_sizes: no selected tactic has {rows}-row tiles (the selected tactics have {})",
        rows_list(selected)
    )]
    NoTacticAtTile {
        /// The rows given.
        rows: u32,
        /// The tile sizes of the selected tactics.
        selected: Vec<u32>,
    },
}

fn rows_list(rows: &[u32]) -> String {
    let r: Vec<String> = rows.iter().map(u32::to_string).collect();
    format!("{{{}}}", r.join(", "))
}

/// What a build emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emitted {
    /// The module file.
    pub module: PathBuf,
    /// Kernels generated.
    pub kernels: usize,
    /// Files written (the rest were already identical).
    pub written: usize,
}

/// Describes a kernel set and writes it for `include_kernels!()`.
#[derive(Clone, Debug)]
pub struct Builder {
    spec: KernelSetSpec,
    /// The rows `tile_sizes` was given, checked against the final target when emitting.
    tile_rows: Option<Vec<u32>>,
    out_dir: Option<PathBuf>,
    cargo_directives: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// Every NVFP4 tactic for sm_100f with the bulk reduce-add finalize and the sm_100
    /// SIMT kernels.
    pub fn new() -> Self {
        let mut spec = KernelSetSpec::full(Target::Sm100f);
        spec.formats = vec![WeightFormat::Nvfp4];
        spec.finalize = vec![FinalizeMode::BulkReduceAdd];
        // Only the target's default recipe (whatever target is chosen later).
        spec.recipes = Vec::new();
        spec.simt = vec![SimtTarget::Sm100f];
        spec.sm90 = Vec::new();
        spec.corpus = false;
        Self { spec, tile_rows: None, out_dir: None, cargo_directives: true }
    }

    /// The GEMMs' PTX target.
    pub fn target(mut self, target: Target) -> Self {
        self.spec.target = target;
        self
    }
    /// The weight format of the SM100 GEMMs (default NVFP4): NVFP4 (with NVFP4 activations)
    /// or MXFP4 (with MXFP8 activations, `kind::mxf8f6f4`).
    pub fn format(mut self, format: WeightFormat) -> Self {
        self.spec.formats = vec![format];
        self
    }
    /// Several weight formats at once ([`Self::format`] for each).
    pub fn formats(mut self, formats: &[WeightFormat]) -> Self {
        self.spec.formats = formats.to_vec();
        self
    }
    /// Only these tactics (default: all 16).
    pub fn tactics(mut self, tactics: impl IntoIterator<Item = MoeTactic>) -> Self {
        self.spec.tactics = tactics.into_iter().collect();
        self
    }
    /// Only the tactics whose routing tile has `rows` rows (128 or 256 on SM100), whenever
    /// the tactics are chosen; a size that is not the target's, or that no chosen tactic
    /// has, is refused when emitting.
    pub fn tile_sizes(mut self, rows: &[u32]) -> Self {
        self.spec.tactics.retain(|t| rows.contains(&t.tile().rows()));
        self.tile_rows = Some(rows.to_vec());
        self
    }
    /// GEMM2 finalize modes to generate.
    pub fn finalize_modes(mut self, modes: impl IntoIterator<Item = FinalizeMode>) -> Self {
        self.spec.finalize = modes.into_iter().collect();
        self
    }
    /// GEMM1 epilogue recipes to generate (default: the target's, Fast on SM100).
    pub fn recipes(mut self, recipes: impl IntoIterator<Item = EpilogueRecipe>) -> Self {
        self.spec.recipes = recipes.into_iter().collect();
        self
    }
    /// GEMM1's SwiGLU input precision.
    pub fn swiglu_input(mut self, v: SwigluInput) -> Self {
        self.spec.swiglu_input = v;
        self
    }

    /// The epilogue functions to generate the GEMMs with (default: plain SwiGLU without
    /// biases), each for every tactic: GEMM1 per activation and GEMM1 bias, GEMM2 per GEMM2
    /// bias (`EpilogueSpec::GPT_OSS` for gpt-oss's clamped SwiGLU and biases).
    pub fn epilogues(mut self, epilogues: impl IntoIterator<Item = EpilogueSpec>) -> Self {
        self.spec.epilogues = epilogues.into_iter().collect();
        self
    }
    /// Shallower pipelines for one GEMM tactic (refused when emitting if too deep).
    pub fn depths(mut self, gemm: GemmTactic, ab_stages: u32, acc_stages: u32) -> Self {
        self.spec.depths.retain(|d| d.gemm != gemm);
        self.spec.depths.push(DepthOverride { gemm, ab_stages, acc_stages });
        self
    }
    /// SIMT kernel flavours (sm_100f, sm_90a).
    pub fn simt_targets(mut self, targets: impl IntoIterator<Item = SimtTarget>) -> Self {
        self.spec.simt = targets.into_iter().collect();
        self
    }
    /// Writes into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }
    /// Whether to print `cargo::rerun-if-*` lines (on by default; off outside build scripts).
    pub fn cargo_directives(mut self, on: bool) -> Self {
        self.cargo_directives = on;
        self
    }
    /// The spec being built.
    pub fn spec(&self) -> &KernelSetSpec {
        &self.spec
    }

    /// Generates the set and writes `moegen_kernels.rs`, `moegen_kernels.json` and
    /// `moegen_ptx/*.ptx`, touching only files whose bytes change.
    pub fn emit(self) -> Result<Emitted, BuildError> {
        if self.cargo_directives {
            // The output depends on nothing but this build script and the generator's own
            // version (a dependency change reruns the script anyway).
            println!("cargo::rerun-if-changed=build.rs");
        }
        let mut spec = self.spec;
        if let Some(rows) = &self.tile_rows {
            check_tile_rows(&spec, rows)?;
            spec.tactics.retain(|t| rows.contains(&t.tile().rows()));
        }
        if spec.tactics.is_empty() {
            return Err(BuildError::Empty { option: "tactics" });
        }
        if spec.finalize.is_empty() {
            return Err(BuildError::Empty { option: "finalize_modes" });
        }
        if spec.epilogues.is_empty() {
            return Err(BuildError::Empty { option: "epilogues" });
        }
        let dir = match self.out_dir {
            Some(d) => d,
            None => std::env::var_os("OUT_DIR").map(PathBuf::from).ok_or(BuildError::NoOutDir)?,
        };
        let kernels = build_set(&spec)?;
        let ptx_dir = dir.join("moegen_ptx");
        let manifest = dir.join("moegen_kernels.json");
        let source = TextSource::Files {
            ptx_dir: ptx_dir.display().to_string(),
            manifest: manifest.display().to_string(),
        };
        let mut written = 0;
        let mut write = |path: &Path, text: &str| -> Result<(), BuildError> {
            written += usize::from(write_if_changed(path, text)?);
            Ok(())
        };
        for k in &kernels {
            write(&ptx_dir.join(format!("{}.ptx", k.name)), &k.ptx)?;
        }
        write(&manifest, &manifest_json(&kernels)?)?;
        let items = render_items(&kernels, &source, false)?;
        let module = dir.join(MODULE_FILE);
        write(
            &module,
            &format!("// Generated by moegen's build-script Builder; do not edit.\n{items}"),
        )?;
        Ok(Emitted { module, kernels: kernels.len(), written })
    }
}

/// Checks `tile_sizes`' rows: each one of the target's tile sizes and used by a tactic of
/// `spec` (the tactics before the tile filter).
fn check_tile_rows(spec: &KernelSetSpec, rows: &[u32]) -> Result<(), BuildError> {
    if rows.is_empty() {
        return Err(BuildError::Empty { option: "tile_sizes" });
    }
    let target = spec.target;
    let allowed: Vec<u32> = match target.arch() {
        Arch::Sm100 => TileSize::SM100.iter().map(|t| t.rows()).collect(),
        Arch::Sm90 => TileSize::SM90.iter().map(|t| t.rows()).collect(),
    };
    let mut selected: Vec<u32> = spec.tactics.iter().map(|t| t.tile().rows()).collect();
    selected.sort_unstable();
    selected.dedup();
    for &r in rows {
        if !allowed.contains(&r) {
            return Err(BuildError::TileSize { rows: r, target, allowed });
        }
        if !selected.contains(&r) {
            return Err(BuildError::NoTacticAtTile { rows: r, selected });
        }
    }
    Ok(())
}

/// All 16 NVFP4 tactics (for filtering in a build script).
pub fn all_tactics() -> Vec<MoeTactic> {
    nvfp4_tactics()
}
