//! Driving ptxas and nvdisasm on generated PTX.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::tools::{self, ToolError};

/// What `ptxas -v` reports for one entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PtxasReport {
    /// Registers per thread.
    pub registers: u32,
    /// Spill store bytes.
    pub spill_stores: u32,
    /// Spill load bytes.
    pub spill_loads: u32,
    /// Stack frame bytes.
    pub stack_frame: u32,
    /// ptxas's advisory that it serialized the kernel's wgmmas ("wgmma.mma_async
    /// instructions are serialized due to …": each wgmma then waits for the previous one,
    /// and the dequantization no longer overlaps the tensor cores), the first such line as
    /// it printed it; `None` when it did not. Matched by its text: its code moves between
    /// ptxas versions (C7509–C7520 seen), and the neighbouring codes are notices that
    /// ptxas inserted a warpgroup arrive or wait, not serializations.
    pub wgmma_serialized: Option<String>,
}

fn scratch_path(ext: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("moegen-{}-{n}.{ext}", std::process::id()))
}

fn number_before(line: &str, unit: &str) -> Option<u32> {
    let i = line.find(unit)?;
    line[..i].split_whitespace().last()?.parse().ok()
}

/// The words of ptxas's wgmma-serialization advisory, in every version seen.
const WGMMA_SERIALIZED: &str = "wgmma.mma_async instructions are serialized";

/// Parses `ptxas -v` output.
pub fn parse_report(text: &str) -> PtxasReport {
    let mut r = PtxasReport::default();
    for line in text.lines() {
        if let Some(v) = number_before(line, "bytes stack frame") {
            r.stack_frame = v;
        }
        if let Some(v) = number_before(line, "bytes spill stores") {
            r.spill_stores = v;
        }
        if let Some(v) = number_before(line, "bytes spill loads") {
            r.spill_loads = v;
        }
        if let Some(v) = number_before(line, "registers") {
            r.registers = v;
        }
        if r.wgmma_serialized.is_none() && line.contains(WGMMA_SERIALIZED) {
            r.wgmma_serialized = Some(line.trim().to_owned());
        }
    }
    r
}

/// A failed ptxas or nvdisasm run.
#[derive(Debug, thiserror::Error)]
pub enum PtxasError {
    /// The tool is missing.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A scratch file could not be written or read, or the tool not started.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// `writing`, `reading` or `running`.
        action: &'static str,
        /// The file or the tool.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The tool ran and refused its input.
    #[error("{command} failed:\n{output}")]
    Failed {
        /// The command (`ptxas -arch=sm_100f`, `nvdisasm`).
        command: String,
        /// What it printed.
        output: String,
    },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PtxasError {
    let path = path.to_path_buf();
    move |source| PtxasError::Io { action, path, source }
}

/// Assembles `ptx` for `arch` (e.g. `sm_100f`); returns the report and the cubin.
pub fn assemble(ptx: &str, arch: &str) -> Result<(PtxasReport, Vec<u8>), PtxasError> {
    let ptxas = tools::ptxas()?;
    let src = scratch_path("ptx");
    let out = scratch_path("cubin");
    std::fs::write(&src, ptx).map_err(io("writing", &src))?;
    let result = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .map_err(io("running", &ptxas));
    let _ = std::fs::remove_file(&src);
    let result = result?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    if !result.status.success() {
        let _ = std::fs::remove_file(&out);
        return Err(PtxasError::Failed { command: format!("ptxas -arch={arch}"), output: text });
    }
    let cubin = std::fs::read(&out).map_err(io("reading", &out));
    let _ = std::fs::remove_file(&out);
    Ok((parse_report(&text), cubin?))
}

/// SASS text of a cubin.
pub fn disassemble(cubin: &[u8]) -> Result<String, PtxasError> {
    let nvdisasm = tools::nvdisasm()?;
    let path = scratch_path("cubin");
    std::fs::write(&path, cubin).map_err(io("writing", &path))?;
    let out = Command::new(&nvdisasm).arg("-c").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = out.map_err(io("running", &nvdisasm))?;
    if !out.status.success() {
        let output = String::from_utf8_lossy(&out.stderr).into_owned();
        return Err(PtxasError::Failed { command: "nvdisasm".into(), output });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Instruction families counted in SASS: the tensor-core (UTCOMMA: SM100 `kind::mxf4nvf4`,
/// UTCQMMA: SM100 `kind::mxf8f6f4`, HGMMA: Hopper bf16 wgmma, QGMMA: Hopper FP8 wgmma) and
/// copy families by opcode prefix, and the facts that tell latency-bound code from throughput-bound code: calls
/// (`div.rn`'s slow path), reconvergence points, MUFU, packed f32 arithmetic, memory
/// barriers by scope (a `MEMBAR.*.GPU` waits for every outstanding access of the thread to
/// reach the whole GPU), async-proxy fences and tensor-map prefetches.
pub const SASS_FAMILIES: [&str; 22] = [
    "UTCOMMA",
    "UTCQMMA",
    "UTCCP",
    "UTMALDG",
    "UTMASTG",
    "LDGSTS",
    "UBLKRED",
    "UBLKCP",
    "SYNCS",
    "HGMMA",
    "QGMMA",
    "CALL",
    "BSSY",
    "MUFU",
    "FMUL2",
    "FFMA2",
    "FADD2",
    "MEMBAR.CTA",
    "MEMBAR.GPU",
    "MEMBAR.SYS",
    "FENCE.VIEW.ASYNC",
    "UTMACCTL.PF",
];

/// Whether opcode `op` (with its modifiers) belongs to `family`: memory barriers by their
/// scope suffix (`MEMBAR.ALL.GPU`, `MEMBAR.SC.CTA`, …), everything else by prefix.
fn in_family(op: &str, family: &str) -> bool {
    match family.strip_prefix("MEMBAR") {
        Some(scope) => op.starts_with("MEMBAR") && op.ends_with(scope),
        None => op.starts_with(family),
    }
}

/// SASS counts: per family (opcode prefix match) and the total instruction count.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SassCounts {
    /// `(family, count)` in [`SASS_FAMILIES`] order.
    pub families: Vec<(String, u32)>,
    /// All instructions.
    pub total: u32,
}

impl SassCounts {
    /// Count of one family.
    pub fn get(&self, family: &str) -> u32 {
        self.families.iter().find(|(f, _)| f == family).map_or(0, |(_, n)| *n)
    }
}

/// Counts the instructions of nvdisasm output.
pub fn count_sass(sass: &str) -> SassCounts {
    let mut fam = vec![0u32; SASS_FAMILIES.len()];
    let mut total = 0;
    for line in sass.lines() {
        let t = line.trim_start();
        // Instruction lines look like `/*0120*/   @!P0 OPCODE.MOD operands ;`.
        let Some(rest) =
            t.strip_prefix("/*").and_then(|r| r.split_once("*/")).map(|(_, r)| r.trim_start())
        else {
            continue;
        };
        if rest.is_empty() || !rest.ends_with(';') {
            continue;
        }
        total += 1;
        let op = rest.split_whitespace().find(|w| !w.starts_with('@')).unwrap_or("");
        for (i, f) in SASS_FAMILIES.iter().enumerate() {
            if in_family(op, f) {
                fam[i] += 1;
            }
        }
    }
    SassCounts { families: SASS_FAMILIES.iter().map(|f| f.to_string()).zip(fam).collect(), total }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_reads_spills_registers_and_the_wgmma_advisory() {
        let text = "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async \
                    instructions are serialized due to insufficient register resources for \
                    the function 'k'\n\
                    ptxas info    : Used 168 registers, used 16 barriers\n    \
                    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n";
        let r = parse_report(text);
        assert_eq!((r.registers, r.stack_frame, r.spill_stores, r.spill_loads), (168, 8, 4, 12));
        assert!(r.wgmma_serialized.as_deref().is_some_and(|a| a.contains("C7512")));
        let clean = parse_report("ptxas info    : Used 80 registers\n");
        assert_eq!(clean.wgmma_serialized, None);
    }

    #[test]
    fn the_advisory_is_matched_by_its_words_not_its_code() {
        // Another version's code for a serialization.
        let other = "ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async \
                     instructions are serialized due to program dependence on \
                     compiler-inserted WG.AR in divergent path in the function 'k'";
        assert!(parse_report(other).wgmma_serialized.is_some());
        // A notice in the same code range, in a kernel whose name says wgmma: no
        // serialization.
        let notice = "ptxas info    : (C7519) warpgroup.arrive is injected in around line 23 \
                      by compiler to allow use of registers in GMMA in function \
                      'moegen_sm90_corpus_wgmma'";
        assert_eq!(parse_report(notice).wgmma_serialized, None);
    }
}
