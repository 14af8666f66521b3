//! Rendering a kernel as a PTX module through the `templates/ptx_module.tera` skeleton.
//! The template uses `<% %>`, `<< >>` and `<# #>` as delimiters: tera's default `{%` would
//! collide with PTX vector operands such as `{%r0, %r1}`.

use std::sync::OnceLock;

use tera::{Context, Delimiters, Tera};

use super::builder::KernelBuilder;
use super::error::BuildError;

const MODULE_TEMPLATE: &str = include_str!("../../../templates/ptx_module.tera");

/// A template engine configured with PTX-safe delimiters.
pub fn ptx_tera() -> Result<Tera, tera::Error> {
    let mut t = Tera::new();
    t.autoescape_on(Vec::<&str>::new());
    t.set_delimiters(Delimiters {
        block_start: "<%".into(),
        block_end: "%>".into(),
        variable_start: "<<".into(),
        variable_end: ">>".into(),
        comment_start: "<#".into(),
        comment_end: "#>".into(),
    })?;
    t.add_raw_template("ptx_module", MODULE_TEMPLATE)?;
    Ok(t)
}

/// Why a kernel did not render as a PTX module.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The builder recorded errors while the kernel was built: nothing is emitted.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Build(Vec<BuildError>),
    /// The module template did not load (it is compiled into the crate, so this is a
    /// defect of the template, reported rather than panicking).
    #[error("PTX module template: {0}")]
    Engine(&'static tera::Error),
    /// The template engine failed while rendering this kernel.
    #[error("rendering the PTX module: {0}")]
    Template(#[from] tera::Error),
}

fn engine() -> Result<&'static Tera, RenderError> {
    static ENGINE: OnceLock<Result<Tera, tera::Error>> = OnceLock::new();
    ENGINE.get_or_init(ptx_tera).as_ref().map_err(RenderError::Engine)
}

/// Module-level facts the skeleton prints.
#[derive(Clone, Debug)]
pub struct ModuleHeader<'a> {
    /// `.version`.
    pub ptx_version: &'a str,
    /// `.target`.
    pub target: &'a str,
    /// One-line description in the header comment.
    pub description: &'a str,
}

/// Renders `k` as a complete PTX module.
pub fn render_module(k: &KernelBuilder, header: &ModuleHeader<'_>) -> Result<String, RenderError> {
    if !k.errors().is_empty() {
        return Err(RenderError::Build(k.errors().to_vec()));
    }
    let mut ctx = Context::new();
    ctx.insert("kernel", &k.name);
    ctx.insert("ptx_version", header.ptx_version);
    ctx.insert("target", header.target);
    ctx.insert("description", header.description);
    ctx.insert("dyn_smem", &k.dynamic_smem);
    let params: Vec<String> = k.params.iter().map(|p| p.decl()).collect();
    ctx.insert("params", &params);
    ctx.insert("directives", &k.directives);
    let regs: Vec<String> = k
        .reg_counts()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(c, n)| format!(".reg {} %{}<{}>;", c.ptx_type(), c.prefix(), n))
        .collect();
    ctx.insert("regs", &regs);
    let body: Vec<String> = k.body().iter().map(ToString::to_string).collect();
    ctx.insert("body", &body.join("\n"));
    Ok(engine()?.render("ptx_module", &ctx)?)
}
