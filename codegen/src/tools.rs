//! Locating the NVIDIA command-line tools (installed from PyPI by
//! `scripts/install-cuda-tools.sh`, or wherever the environment points).

use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Root of the CUDA 13 tool folder: `$MOEGEN_CUDA_HOME`, else the one the install script
/// fills, `<workspace>/.tools/cuda/nvidia/cu13`.
pub fn cuda_home() -> PathBuf {
    std::env::var_os("MOEGEN_CUDA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/cuda/nvidia/cu13"))
}

/// A tool or header the assembly checks need, missing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// A binary not at the path its variable (or the default) names.
    #[error(
        "{tool} not found at {} (run scripts/install-cuda-tools.sh, or set {env} / MOEGEN_CUDA_HOME)",
        path.display()
    )]
    NotFound {
        /// The tool.
        tool: &'static str,
        /// The variable that overrides its path.
        env: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The CUDA headers, missing from the include folder.
    #[error(
        "cuda_fp4.h not found in {} (run scripts/install-cuda-tools.sh, or set MOEGEN_CUDA_HOME)",
        dir.display()
    )]
    NoHeaders {
        /// The include folder looked in.
        dir: PathBuf,
    },
}

fn existing(tool: &'static str, env: &'static str, default: PathBuf) -> Result<PathBuf, ToolError> {
    let path = std::env::var_os(env).map(PathBuf::from).unwrap_or(default);
    if path.exists() { Ok(path) } else { Err(ToolError::NotFound { tool, env, path }) }
}

/// The ptxas binary: `$MOEGEN_PTXAS`, else `<cuda_home>/bin/ptxas`.
pub fn ptxas() -> Result<PathBuf, ToolError> {
    existing("ptxas", "MOEGEN_PTXAS", cuda_home().join("bin/ptxas"))
}

/// The nvdisasm binary: `$MOEGEN_NVDISASM`, else `<cuda_home>/bin/nvdisasm`.
pub fn nvdisasm() -> Result<PathBuf, ToolError> {
    existing("nvdisasm", "MOEGEN_NVDISASM", cuda_home().join("bin/nvdisasm"))
}

/// The CUDA include folder holding `cuda_fp4.h` and `cuda_fp8.h`: `<cuda_home>/include`.
pub fn cuda_include() -> Result<PathBuf, ToolError> {
    let dir = cuda_home().join("include");
    if dir.join("cuda_fp4.h").exists() { Ok(dir) } else { Err(ToolError::NoHeaders { dir }) }
}
