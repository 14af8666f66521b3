//! Rendering a kernel as a PTX module through the `templates/ptx_module.tera` skeleton.
//! The template uses `<% %>`, `<< >>` and `<# #>` as delimiters: tera's default `{%` would
//! collide with PTX vector operands such as `{%r0, %r1}`.

use std::sync::OnceLock;

use tera::{Context, Delimiters, Tera};

use super::builder::KernelBuilder;

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

fn engine() -> Result<&'static Tera, String> {
    static ENGINE: OnceLock<Result<Tera, String>> = OnceLock::new();
    ENGINE.get_or_init(|| ptx_tera().map_err(|e| e.to_string())).as_ref().map_err(Clone::clone)
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
pub fn render_module(k: &KernelBuilder, header: &ModuleHeader<'_>) -> Result<String, String> {
    if !k.errors().is_empty() {
        let errors: Vec<String> = k.errors().iter().map(ToString::to_string).collect();
        return Err(errors.join("; "));
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
    engine()?.render("ptx_module", &ctx).map_err(|e| e.to_string())
}
