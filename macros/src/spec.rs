//! The body of `moe_kernels!` read into the options of a kernel set, every value kept with
//! its span. Tactics are validated here by the DSL's own constructors (`GemmTactic::new`,
//! `MoeTactic::new`, `plan_gemm`), each error placed on the token that caused it.

use proc_macro2::Span;
use syn::Error;

use moegen_codegen::builder::Builder;
use moegen_dsl::abi::SimtTarget;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{
    Activation, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, GemmKind, GemmTactic, MoeTactic,
    Raster, SwigluInput, TacticError, Target, TileSize,
};

use crate::fields::{Keys, choice, choices, int, list, map, pair};
use crate::value::{Map, Value};

const TOP_KEYS: &[&str] =
    &["target", "format", "tactics", "finalize", "swiglu_input", "recipes", "epilogues", "simt"];
const EPILOGUE_KEYS: &[&str] = &["activation", "gemm1_bias", "gemm2_bias"];
const TACTIC_KEYS: &[&str] = &["tile", "gemm1", "gemm2"];
const GEMM_KEYS: &[&str] = &["mma", "cluster", "raster", "ab_stages", "acc_stages"];

/// An option and the token that set it (`None`: the default, set by nobody).
#[derive(Clone, Copy, Debug)]
pub struct Given<T> {
    /// The value.
    pub value: T,
    /// Its token.
    pub span: Option<Span>,
}

impl<T> Given<T> {
    fn unwritten(value: T) -> Self {
        Self { value, span: None }
    }
    fn at(value: T, span: Span) -> Self {
        Self { value, span: Some(span) }
    }
}

/// One GEMM of a tactic as written.
#[derive(Clone, Debug)]
pub struct GemmDecl {
    /// The validated tactic.
    pub tactic: GemmTactic,
    /// The `gemm1`/`gemm2` key: blamed for what no single value explains.
    pub span: Span,
    /// The raster order's token, if written.
    pub raster: Option<Span>,
    /// A/B stages, if written.
    pub ab_stages: Option<(u32, Span)>,
    /// Accumulator stages, if written.
    pub acc_stages: Option<(u32, Span)>,
}

impl GemmDecl {
    /// Whether `ab_stages` or `acc_stages` is written.
    pub fn overrides_depths(&self) -> bool {
        self.ab_stages.is_some() || self.acc_stages.is_some()
    }

    /// The depths this GEMM asks for in weights of `format`: the written ones, the resource
    /// model's for the rest (planned for the activations the set's GEMMs of `format` take).
    pub fn depths(&self, target: Target, format: WeightFormat) -> syn::Result<(u32, u32)> {
        let planned = planned(target, &self.tactic, format)
            .map_err(|e| Error::new(self.span, e.to_string()))?;
        Ok((
            self.ab_stages.map_or(planned.ab_stages, |(v, _)| v),
            self.acc_stages.map_or(planned.acc_stages, |(v, _)| v),
        ))
    }

    /// The token to blame for a depth conflict.
    pub fn depth_span(&self) -> Span {
        self.ab_stages.or(self.acc_stages).map_or(self.span, |(_, s)| s)
    }
}

/// The resource model's budget of `tactic` in a set of `format` on `target`.
pub fn planned(
    target: Target,
    tactic: &moegen_dsl::GemmTactic,
    format: WeightFormat,
) -> Result<moegen_dsl::KernelBudget, moegen_dsl::ResourceError> {
    let activations = moegen_codegen::kernel_set::set_activations(target, format);
    moegen_dsl::plan_gemm_with(target, tactic, format, activations)
}

/// One whole-layer tactic as written.
#[derive(Clone, Debug)]
pub struct TacticDecl {
    /// The validated tactic.
    pub tactic: MoeTactic,
    /// The tactic's `{ … }`.
    pub span: Span,
    /// GEMM1 and GEMM2.
    pub gemms: [GemmDecl; 2],
}

/// Everything `moe_kernels!` was told.
#[derive(Clone, Debug)]
pub struct Declared {
    /// GEMM target.
    pub target: Given<Target>,
    /// Operand format.
    pub format: Given<WeightFormat>,
    /// Tactics, in the order written.
    pub tactics: Vec<TacticDecl>,
    /// GEMM2 finalize modes.
    pub finalize: Vec<Given<FinalizeMode>>,
    /// GEMM1's SwiGLU input precision.
    pub swiglu_input: Given<SwigluInput>,
    /// GEMM1 epilogue recipes (empty: the target's default).
    pub recipes: Vec<EpilogueRecipe>,
    /// Epilogue functions (GEMM1's activation, the biases), each for every tactic.
    pub epilogues: Vec<EpilogueSpec>,
    /// SIMT kernel flavours.
    pub simt: Vec<SimtTarget>,
}

/// Reads the module body; a key left out takes the build-script `Builder`'s default.
pub fn read(body: &Map) -> syn::Result<Declared> {
    let defaults = Builder::new().spec().clone();
    let keys = Keys::new(body, "moe_kernels!", TOP_KEYS)?;
    let target = match keys.get("target") {
        Some(v) => read_target(v)?,
        None => Given::unwritten(defaults.target),
    };
    const FORMATS: &[(&str, WeightFormat)] =
        &[("nvfp4", WeightFormat::Nvfp4), ("mxfp4", WeightFormat::Mxfp4)];
    let format = match keys.get("format") {
        Some(v) => Given::at(choice(v, "format", FORMATS)?, v.span()),
        None => Given::unwritten(defaults.formats.first().copied().unwrap_or(WeightFormat::Nvfp4)),
    };
    let tactics: Vec<TacticDecl> = match keys.get("tactics") {
        Some(v) => list(v, "tactics", true)?.iter().map(read_tactic).collect::<Result<_, _>>()?,
        None => defaults.tactics.into_iter().map(|t| default_tactic(t, body.span)).collect(),
    };
    refuse_repeats(&tactics)?;
    const FINALIZE: &[(&str, FinalizeMode)] = &[
        ("bulk_reduce_add", FinalizeMode::BulkReduceAdd),
        ("deterministic", FinalizeMode::Deterministic),
    ];
    let finalize = match keys.get("finalize") {
        Some(v) => choices(v, "finalize", FINALIZE, true)?
            .into_iter()
            .map(|(mode, span)| Given::at(mode, span))
            .collect(),
        None => defaults.finalize.into_iter().map(Given::unwritten).collect(),
    };
    const SWIGLU: &[(&str, SwigluInput)] =
        &[("f32", SwigluInput::F32), ("bf16", SwigluInput::Bf16)];
    let swiglu_input = match keys.get("swiglu_input") {
        Some(v) => Given::at(choice(v, "swiglu_input", SWIGLU)?, v.span()),
        None => Given::unwritten(defaults.swiglu_input),
    };
    const RECIPES: &[(&str, EpilogueRecipe)] =
        &[("fast", EpilogueRecipe::Fast), ("exact", EpilogueRecipe::Exact)];
    let recipes = match keys.get("recipes") {
        Some(v) => choices(v, "recipes", RECIPES, true)?.into_iter().map(|(r, _)| r).collect(),
        None => defaults.recipes,
    };
    let epilogues = match keys.get("epilogues") {
        Some(v) => {
            list(v, "epilogues", true)?.iter().map(read_epilogue).collect::<Result<_, _>>()?
        }
        None => defaults.epilogues,
    };
    let simt = match keys.get("simt") {
        Some(v) => choices(v, "simt", &SimtTarget::ALL.map(|t| (t.name(), t)), false)?
            .into_iter()
            .map(|(t, _)| t)
            .collect(),
        None => defaults.simt,
    };
    Ok(Declared { target, format, tactics, finalize, swiglu_input, recipes, epilogues, simt })
}

/// One epilogue: `plain`, `gpt_oss`, or `{ activation: …, gemm1_bias: …, gemm2_bias: … }`
/// (keys left out: plain SwiGLU, no bias).
fn read_epilogue(v: &Value) -> syn::Result<EpilogueSpec> {
    const NAMED: &[(&str, EpilogueSpec)] =
        &[("plain", EpilogueSpec::PLAIN), ("gpt_oss", EpilogueSpec::GPT_OSS)];
    if let Value::Ident(_) = v {
        return choice(v, "epilogue", NAMED);
    }
    let keys = Keys::new(map(v, "epilogue")?, "epilogue", EPILOGUE_KEYS)?;
    const ACTIVATIONS: &[(&str, Activation)] = &[
        ("swiglu", Activation::Swiglu),
        ("swiglu_clamped", Activation::SwigluClamped),
        ("geglu_tanh", Activation::GegluTanh),
        ("relu2", Activation::Relu2),
    ];
    const BOOLS: &[(&str, bool)] = &[("true", true), ("false", false)];
    let mut e = EpilogueSpec::PLAIN;
    if let Some(a) = keys.get("activation") {
        e.activation = choice(a, "activation", ACTIVATIONS)?;
    }
    if let Some(b) = keys.get("gemm1_bias") {
        e.gemm1_bias = choice(b, "gemm1_bias", BOOLS)?;
    }
    if let Some(b) = keys.get("gemm2_bias") {
        e.gemm2_bias = choice(b, "gemm2_bias", BOOLS)?;
    }
    Ok(e)
}

fn read_target(v: &Value) -> syn::Result<Given<Target>> {
    let Value::Ident(id) = v else {
        return Err(Error::new(v.span(), "target: expected a name such as `sm_100f`"));
    };
    let target = id.to_string().parse::<Target>().map_err(|e| Error::new(id.span(), e))?;
    if target.arch() != Arch::Sm100 {
        return Err(Error::new(
            id.span(),
            format!(
                "target {target}: moe_kernels! declares SM100 GEMMs (sm_100f, sm_100a); \
                 Hopper kernel sets come from the build-script Builder"
            ),
        ));
    }
    Ok(Given::at(target, id.span()))
}

fn default_tactic(tactic: MoeTactic, span: Span) -> TacticDecl {
    let gemm = |g: &GemmTactic| GemmDecl {
        tactic: *g,
        span,
        raster: None,
        ab_stages: None,
        acc_stages: None,
    };
    TacticDecl { tactic, span, gemms: [gemm(tactic.gemm1()), gemm(tactic.gemm2())] }
}

fn read_tactic(v: &Value) -> syn::Result<TacticDecl> {
    let m = map(v, "a tactic")?;
    let keys = Keys::new(m, "a tactic", TACTIC_KEYS)?;
    let (rows, tile_span) = int(keys.require("tile", "a tactic")?, "tile")?;
    let tile =
        TileSize::from_rows(rows).map_err(|e| Error::new(tile_span, format!("tile: {e}")))?;
    if !TileSize::SM100.contains(&tile) {
        return Err(Error::new(
            tile_span,
            format!("tile: {rows} rows is a Hopper routing tile; SM100 tiles have 128 or 256 rows"),
        ));
    }
    let gemm = |kind: GemmKind| {
        let name = kind.to_string();
        let span = keys.key(&name).map_or(m.span, |k| k.span());
        read_gemm(kind, keys.require(&name, "a tactic")?, span)
    };
    let (g1, g2) = (gemm(GemmKind::Gemm1)?, gemm(GemmKind::Gemm2)?);
    let tactic = MoeTactic::new(tile, g1.decl.tactic, g2.decl.tactic).map_err(|e| {
        // The routing-tile invariant: blame the MMA M that differs from the tile.
        let span = match &e {
            TacticError::MmaMNotTileSize { gemm: GemmKind::Gemm1, .. } => g1.mma_m,
            TacticError::MmaMNotTileSize { gemm: GemmKind::Gemm2, .. } => g2.mma_m,
            _ => tile_span,
        };
        Error::new(span, e)
    })?;
    let gemms = [g1.decl, g2.decl];
    Ok(TacticDecl { tactic, span: m.span, gemms })
}

struct ReadGemm {
    mma_m: Span,
    decl: GemmDecl,
}

fn read_gemm(kind: GemmKind, v: &Value, span: Span) -> syn::Result<ReadGemm> {
    let what = format!("{kind}");
    let m = map(v, &what)?;
    let keys = Keys::new(m, &what, GEMM_KEYS)?;
    let (mma, [mma_m, mma_n]) = pair(keys.require("mma", &what)?, "mma")?;
    let (cluster, [cluster_m, cluster_n]) = pair(keys.require("cluster", &what)?, "cluster")?;
    let (raster, raster_span) = match keys.get("raster") {
        Some(r) => (
            choice(r, "raster", &[("along_n", Raster::AlongN), ("along_m", Raster::AlongM)])?,
            Some(r.span()),
        ),
        None => (Raster::default(), None),
    };
    let tactic = GemmTactic::new(kind, mma, cluster, raster).map_err(|e| {
        let span = match &e {
            TacticError::UnsupportedMmaM { .. } => mma_m,
            TacticError::UnsupportedMmaN { .. } => mma_n,
            TacticError::ClusterMNotCtaGroup { .. } => cluster_m,
            TacticError::GatherCannotMulticast { .. } | TacticError::UnsupportedClusterN { .. } => {
                cluster_n
            }
            TacticError::UnsupportedSm90N { .. } | TacticError::UnsupportedSchedule { .. } => mma_n,
            TacticError::UnsupportedSm90Tile { .. } => mma_m,
            TacticError::WrongGemmKind { .. }
            | TacticError::MmaMNotTileSize { .. }
            | TacticError::NotAWiderSibling { .. }
            | TacticError::UnsupportedSplitK { .. }
            | TacticError::MixedArch => span,
        };
        Error::new(span, e)
    })?;
    let stages = |key: &str| keys.get(key).map(|v| int(v, key)).transpose();
    let decl = GemmDecl {
        tactic,
        span,
        raster: raster_span,
        ab_stages: stages("ab_stages")?,
        acc_stages: stages("acc_stages")?,
    };
    Ok(ReadGemm { mma_m, decl })
}

/// The same tactic twice is a slip; the same GEMM with other depths in two tactics cannot be
/// honoured (a GEMM kernel is generated once for every tactic that uses it).
fn refuse_repeats(tactics: &[TacticDecl]) -> syn::Result<()> {
    for (i, t) in tactics.iter().enumerate() {
        if let Some(j) = tactics[..i].iter().position(|p| p.tactic == t.tactic) {
            let msg = format!("tactic {} is the same as tactic {}: {}", i + 1, j + 1, t.tactic);
            return Err(Error::new(t.span, msg));
        }
    }
    Ok(())
}

/// Refuses one GEMM tactic given different depths by two tactics.
pub fn refuse_depth_conflicts(d: &Declared) -> syn::Result<()> {
    let gemms: Vec<&GemmDecl> = d.tactics.iter().flat_map(|t| &t.gemms).collect();
    for (i, g) in gemms.iter().enumerate() {
        let mine = g.depths(d.target.value, d.format.value)?;
        for p in gemms[..i].iter().filter(|p| p.tactic == g.tactic) {
            let theirs = p.depths(d.target.value, d.format.value)?;
            if theirs != mine {
                let show = |x: &GemmDecl, (ab, acc): (u32, u32)| {
                    let whose = if x.overrides_depths() { "" } else { " (the resource model's)" };
                    format!("ab_stages {ab}, acc_stages {acc}{whose}")
                };
                let msg = format!(
                    "{} is generated once for every tactic that uses it, and an earlier tactic \
                     gives it other depths: {} there, {} here",
                    g.tactic,
                    show(p, theirs),
                    show(g, mine)
                );
                return Err(Error::new(g.depth_span(), msg));
            }
        }
    }
    Ok(())
}
