//! Writing a kernel set as files: the moegen-kernels crate (`generated/`, or any folder with
//! `gen emit --out`), or a build script's module in `OUT_DIR`; and checking that what is on
//! disk is exactly what the generator produces. Files are written only when their bytes
//! change, so a second run touches nothing and triggers no rebuild.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tera::Context;

use crate::kernel_set::{GeneratedKernel, group};
use crate::ptx::module::ptx_tera;
use crate::{manifest, rust_expr};

const ITEMS_TEMPLATE: &str = include_str!("../../templates/kernels_items.rs.tera");
const LIB_TEMPLATE: &str = include_str!("../../templates/kernels_lib.rs.tera");

/// Groups of the generated crate, in order: (group, constant, behind a feature).
const GROUPS: [(&str, &str, bool); 3] =
    [("sm100", "SM100", false), ("sm90", "SM90", true), ("corpus", "CORPUS", true)];

/// Why a kernel set could not be rendered or written.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The manifest could not be serialized.
    #[error("manifest: {0}")]
    Manifest(#[from] serde_json::Error),
    /// A template of the generated crate failed to parse or render.
    #[error("template {template}: {source}")]
    Template {
        /// The template.
        template: &'static str,
        /// The error.
        #[source]
        source: tera::Error,
    },
    /// A file or folder could not be written or removed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// `creating`, `writing` or `removing`.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn template(template: &'static str) -> impl FnOnce(tera::Error) -> EmitError {
    move |source| EmitError::Template { template, source }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EmitError {
    let path = path.to_path_buf();
    move |source| EmitError::Io { action, path, source }
}

/// The manifest JSON of a set.
pub fn manifest_json(kernels: &[GeneratedKernel]) -> Result<String, EmitError> {
    let entries: Vec<_> = kernels.iter().map(manifest::entry).collect();
    let mut manifest = serde_json::to_string_pretty(&serde_json::json!({
        "generator": "moegen",
        "kernels": entries,
    }))?;
    manifest.push('\n');
    Ok(manifest)
}

/// Where the generated Rust finds the PTX and the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextSource {
    /// `include_str!` of files: `ptx_dir/<kernel>.ptx` and `manifest`, as `include_str!`
    /// sees them from the file the items land in (relative or absolute).
    Files {
        /// Folder of the PTX files.
        ptx_dir: String,
        /// The manifest file.
        manifest: String,
    },
    /// Raw string literals in the items themselves (for a proc macro's expansion).
    Inline,
}

/// A Rust string literal holding `text` exactly (a raw string with enough hashes).
pub fn raw_literal(text: &str) -> String {
    let mut hashes = 1;
    while text.contains(&format!("\"{}", "#".repeat(hashes))) {
        hashes += 1;
    }
    let h = "#".repeat(hashes);
    format!("r{h}\"{text}\"{h}")
}

/// A path inside an `include_str!("…")` literal.
fn path_literal(path: &str) -> String {
    path.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The Rust items (typed `KernelInfo` constants and lookups) of a set; with `gated`,
/// groups other than sm100 are behind cargo features of their name.
pub fn render_items(
    kernels: &[GeneratedKernel],
    source: &TextSource,
    gated: bool,
) -> Result<String, EmitError> {
    let ptx_expr = |k: &GeneratedKernel| match source {
        TextSource::Files { ptx_dir, .. } => {
            format!("include_str!(\"{}/{}.ptx\")", path_literal(ptx_dir), k.name)
        }
        TextSource::Inline => raw_literal(&k.ptx),
    };
    let manifest_expr = match source {
        TextSource::Files { manifest, .. } => {
            format!("include_str!(\"{}\")", path_literal(manifest))
        }
        TextSource::Inline => raw_literal(&manifest_json(kernels)?),
    };
    let mut groups = Vec::new();
    for (name, constant, feature) in GROUPS {
        let members: Vec<_> = kernels
            .iter()
            .filter(|k| !gated || group(&k.id) == name)
            .map(|k| {
                serde_json::json!({
                    "id": rust_expr::kernel_id(&k.id),
                    "name": k.name,
                    "ptx": ptx_expr(k),
                    "target": k.id.ptx_target(),
                    "params": moegen_dsl::abi::signature(&k.id).0,
                    "launch": rust_expr::launch_facts(&k.launch),
                })
            })
            .collect();
        if gated && members.is_empty() {
            continue;
        }
        groups.push(serde_json::json!({
            "name": if gated { name } else { "all" },
            "constant": if gated { constant } else { "KERNELS" },
            "feature": gated && feature,
            "kernels": members,
        }));
        if !gated {
            break;
        }
    }
    let mut t = ptx_tera().map_err(template("ptx_module"))?;
    t.add_raw_template("kernels_items", ITEMS_TEMPLATE).map_err(template("kernels_items"))?;
    let mut ctx = Context::new();
    ctx.insert("groups", &groups);
    ctx.insert("manifest", &manifest_expr);
    ctx.insert("gated", &gated);
    t.render("kernels_items", &ctx).map_err(template("kernels_items"))
}

/// How the generated crate refers to moegen-dsl.
#[derive(Clone, Debug)]
pub struct CrateOptions {
    /// Path of the moegen-dsl crate as the generated Cargo.toml writes it.
    pub dsl_path: String,
    /// Add an empty `[workspace]` so the crate builds on its own outside this workspace.
    pub standalone: bool,
}

impl CrateOptions {
    /// The options for a crate written to `dir`: inside this workspace, a member; anywhere
    /// else, a standalone crate with an absolute path to moegen-dsl.
    pub fn for_dir(dir: &Path) -> Self {
        let root = crate::tools::workspace_root();
        let dir_abs = absolute(dir);
        if dir_abs == absolute(&root.join("generated")) {
            Self { dsl_path: "../dsl".into(), standalone: false }
        } else {
            Self { dsl_path: absolute(&root.join("dsl")).display().to_string(), standalone: true }
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn cargo_toml(o: &CrateOptions) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut s = format!(
        r#"# Generated by `cargo run --bin gen`; do not edit.
[package]
name = "moegen-kernels"
description = "moegen's generated NVFP4 MoE kernels (PTX) as typed KernelInfo values, and their manifest"
version = "{version}"
edition = "2024"
rust-version = "1.88"
license = "Apache-2.0"
publish = false

[dependencies]
moegen-dsl = {{ path = "{}" }}

[features]
# The GEMMs and SIMT kernels for Hopper (sm_90a).
sm90 = []
# The simulator's differential corpus (validation only).
corpus = []
"#,
        o.dsl_path
    );
    if o.standalone {
        s.push_str("\n[workspace]\n");
    }
    s
}

/// Every file of the generated crate, by path relative to its root.
pub fn render_files(
    kernels: &[GeneratedKernel],
    o: &CrateOptions,
) -> Result<BTreeMap<PathBuf, String>, EmitError> {
    let mut files = BTreeMap::new();
    files.insert(PathBuf::from("manifest.json"), manifest_json(kernels)?);
    for k in kernels {
        files.insert(Path::new("ptx").join(format!("{}.ptx", k.name)), k.ptx.clone());
    }
    let source =
        TextSource::Files { ptx_dir: "../ptx".into(), manifest: "../manifest.json".into() };
    let items = render_items(kernels, &source, true)?;
    let mut t = ptx_tera().map_err(template("ptx_module"))?;
    t.add_raw_template("kernels_lib", LIB_TEMPLATE).map_err(template("kernels_lib"))?;
    let mut ctx = Context::new();
    ctx.insert("items", &items);
    files.insert(
        PathBuf::from("src/lib.rs"),
        t.render("kernels_lib", &ctx).map_err(template("kernels_lib"))?,
    );
    files.insert(PathBuf::from("Cargo.toml"), cargo_toml(o));
    Ok(files)
}

/// Files under `dir/ptx` that the generator would not write.
fn stale_ptx(dir: &Path, files: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir.join("ptx")) else { return Vec::new() };
    rd.filter_map(Result::ok)
        .map(|e| Path::new("ptx").join(e.file_name()))
        .filter(|p| !files.contains_key(p))
        .collect()
}

/// What a write did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteSummary {
    /// Files created or whose bytes changed.
    pub written: Vec<PathBuf>,
    /// Files already identical (left untouched, mtime included).
    pub unchanged: usize,
    /// Stale PTX files removed.
    pub removed: Vec<PathBuf>,
}

/// Writes `text` to `path` only if its bytes differ; returns whether it wrote.
pub fn write_if_changed(path: &Path, text: &str) -> Result<bool, EmitError> {
    if std::fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    std::fs::write(path, text).map_err(io("writing", path))?;
    Ok(true)
}

/// Writes the crate into `dir`, touching only files whose bytes change and removing PTX
/// files that are no longer generated.
pub fn write_files(
    dir: &Path,
    files: &BTreeMap<PathBuf, String>,
) -> Result<WriteSummary, EmitError> {
    let mut summary = WriteSummary::default();
    for stale in stale_ptx(dir, files) {
        let path = dir.join(&stale);
        std::fs::remove_file(&path).map_err(io("removing", &path))?;
        summary.removed.push(stale);
    }
    for (rel, text) in files {
        if write_if_changed(&dir.join(rel), text)? {
            summary.written.push(rel.clone());
        } else {
            summary.unchanged += 1;
        }
    }
    Ok(summary)
}

/// Differences between `dir` and what the generator produces: missing, changed and stale
/// files, as human-readable lines (empty when fresh).
pub fn diff_files(dir: &Path, files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        match std::fs::read(dir.join(rel)) {
            Ok(on_disk) if on_disk == text.as_bytes() => {}
            Ok(_) => out.push(format!("changed: {}", rel.display())),
            Err(_) => out.push(format!("missing: {}", rel.display())),
        }
    }
    out.extend(stale_ptx(dir, files).into_iter().map(|p| format!("stale: {}", p.display())));
    out
}

/// The default output folder: `<workspace>/generated`.
pub fn default_out_dir() -> PathBuf {
    crate::tools::workspace_root().join("generated")
}
