//! Which tactics a kernel set can run for a layer, and for every other tactic of the
//! device's tactic space the reason it cannot: a layer that finds no tactic says why each
//! was rejected instead of handing an empty list on.

use std::fmt;

use moegen_dsl::abi::{GemmKey, KernelId, KernelInfo};
use moegen_dsl::plan::{PlanError, check_gemm_dim, gemm_shape_multiple, max_tiles};
use moegen_dsl::{
    Activation, ActivationFormat, Arch, DescError, EpilogueRecipe, FinalizeMode, GemmKind,
    GemmTactic, KernelDescBuilder, MoeTactic, SwigluInput, Target, WeightFormat, tactics_for,
};

use super::forward::LayerConfig;
use super::kernel_set::KernelSet;

/// Why one tactic cannot run a layer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The kernel set holds no GEMM kernel for the device's generation (a set generated for
    /// another target).
    #[error("the kernel set holds no {arch:?} GEMM kernels (its GEMMs are for {})", list(held))]
    OtherArch {
        /// The device's generation.
        arch: Arch,
        /// The generations the set's GEMMs are for.
        held: Vec<Arch>,
    },
    /// The set holds no kernel of this GEMM tactic at all.
    #[error("the kernel set has no {gemm} kernel")]
    NotInSet {
        /// The GEMM.
        gemm: GemmTactic,
    },
    /// The set holds the GEMM, for other weight formats only.
    #[error(
        "{gemm} is in the set for weight format {}, the layer's weights are {wanted:?}",
        list(present)
    )]
    Format {
        /// The GEMM.
        gemm: GemmTactic,
        /// The layer's weight format.
        wanted: WeightFormat,
        /// The formats the set holds it for.
        present: Vec<WeightFormat>,
    },
    /// The set holds the GEMM, for other activation formats only.
    #[error("{gemm} is in the set for activations {}, the layer's are {wanted:?}", list(present))]
    Activations {
        /// The GEMM.
        gemm: GemmTactic,
        /// The layer's activation format.
        wanted: ActivationFormat,
        /// The formats the set holds it for.
        present: Vec<ActivationFormat>,
    },
    /// The set holds the GEMM2, with other finalize modes only.
    #[error(
        "{gemm} is in the set with finalize {}, the layer's finalize is {wanted:?}",
        list(present)
    )]
    Finalize {
        /// The GEMM2.
        gemm: GemmTactic,
        /// The layer's finalize mode ([`LayerConfig::finalize`]).
        wanted: FinalizeMode,
        /// The modes the set holds it with.
        present: Vec<FinalizeMode>,
    },
    /// The set holds the GEMM1, with another SwiGLU input precision only.
    #[error("{gemm} is in the set with SwiGLU input {}, the layer's is {wanted:?}", list(present))]
    SwigluInput {
        /// The GEMM1.
        gemm: GemmTactic,
        /// The layer's [`LayerConfig::swiglu_input`].
        wanted: SwigluInput,
        /// The precisions the set holds it with.
        present: Vec<SwigluInput>,
    },
    /// The set holds the GEMM1, with other epilogue recipes only.
    #[error("{gemm} is in the set with recipe {}, the layer's is {wanted:?}", list(present))]
    Recipe {
        /// The GEMM1.
        gemm: GemmTactic,
        /// The layer's recipe on the kernel's target ([`LayerConfig::recipe_on`]).
        wanted: EpilogueRecipe,
        /// The recipes the set holds it with.
        present: Vec<EpilogueRecipe>,
    },
    /// The set holds the GEMM1, with other activation functions only.
    #[error("{gemm} is in the set with activation {}, the layer's is {wanted:?}", list(present))]
    Activation {
        /// The GEMM1.
        gemm: GemmTactic,
        /// The layer's [`LayerConfig::epilogue`] activation.
        wanted: Activation,
        /// The activations the set holds it with.
        present: Vec<Activation>,
    },
    /// The set holds the GEMM, with or without a bias only the other way round.
    #[error("{gemm} is in the set with bias {}, the layer's is {wanted:?}", list(present))]
    Bias {
        /// The GEMM.
        gemm: GemmTactic,
        /// Whether the layer's [`LayerConfig::epilogue`] adds this GEMM's bias.
        wanted: bool,
        /// What the set holds it with.
        present: Vec<bool>,
    },
    /// The layer's options describe no kernel of this GEMM on the target (e.g. bf16
    /// activations on SM100, or MXFP4 weights there).
    #[error("{gemm} on {target}: {source}")]
    Refused {
        /// The GEMM.
        gemm: GemmTactic,
        /// The target it was described for.
        target: Target,
        /// The description's refusal.
        source: DescError,
    },
    /// H or I is not a multiple of the target's granularity (64 on both: SM100's MMA K,
    /// Hopper's weight fragments).
    #[error(transparent)]
    Shape(PlanError),
    /// The GEMM's clusters cannot cover the layer's N dimension (GEMM1: 2 × I, ReLU²'s I;
    /// GEMM2: H).
    #[error("{}", not_covered(gemm, dim, *value, *rows_per_value, *next))]
    NotCovered {
        /// The GEMM.
        gemm: GemmTactic,
        /// `hidden size` or `intermediate size`.
        dim: &'static str,
        /// Its value.
        value: u64,
        /// The GEMM's N per unit of it: 2 for a gated GEMM1 (2I rows), 1 for ReLU²'s GEMM1
        /// and for GEMM2.
        rows_per_value: u64,
        /// The next larger value of that dimension this GEMM serves, if one is near.
        next: Option<u64>,
    },
    /// The GEMM splits K over more CTAs than the layer's K has 128-element stages
    /// ([`GemmTactic::fits_k`]): a rank would have nothing to add.
    #[error(
        "{gemm} splits K over {} CTAs; the {dim} {value} has {} stages of 128",
        gemm.split_k(),
        value.div_ceil(128)
    )]
    ShortK {
        /// The GEMM.
        gemm: GemmTactic,
        /// `hidden size` (GEMM1's K) or `intermediate size` (GEMM2's).
        dim: &'static str,
        /// Its value.
        value: u64,
    },
    /// The maximum token count gives no routing tile.
    #[error("no routing tile for {max_tokens} tokens: {source}")]
    Tokens {
        /// The maximum token count asked for.
        max_tokens: u64,
        /// What the sizing refused.
        source: PlanError,
    },
}

impl Rejection {
    /// A short name for the kind of reason (what a summary groups by).
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::OtherArch { .. } => "kernel set for another target",
            Rejection::NotInSet { .. } => "GEMM not in the kernel set",
            Rejection::Format { .. } => "weight format not in the kernel set",
            Rejection::Activations { .. } => "activation format not in the kernel set",
            Rejection::Finalize { .. } => "finalize mode not in the kernel set",
            Rejection::SwigluInput { .. } => "SwiGLU input not in the kernel set",
            Rejection::Recipe { .. } => "epilogue recipe not in the kernel set",
            Rejection::Activation { .. } => "activation function not in the kernel set",
            Rejection::Bias { .. } => "bias option not in the kernel set",
            Rejection::Refused { .. } => "options the target cannot run",
            Rejection::Shape(_) => "shape not a multiple of the GEMMs' granularity",
            Rejection::NotCovered { .. } => "shape not covered by the GEMM's clusters",
            Rejection::ShortK { .. } => "K too short for the GEMM's split",
            Rejection::Tokens { .. } => "token count",
        }
    }
}

fn list<T: fmt::Debug>(items: &[T]) -> String {
    let names: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    names.join(" or ")
}

fn not_covered(
    gemm: &GemmTactic,
    dim: &str,
    value: u64,
    rows_per_value: u64,
    next: Option<u64>,
) -> String {
    let n = u64::from(gemm.mma_tiler()[1]);
    let cn = gemm.cluster()[1];
    let cols = rows_per_value * value;
    let what = match rows_per_value {
        1 => format!("{dim} = {value}"),
        r => format!("{r} × {dim} = {cols}"),
    };
    let mut s = match gemm.arch() {
        Arch::Sm90 => format!(
            "{gemm} needs its N ({what}) to be a multiple of {}",
            moegen_dsl::sm90_n_granule(gemm.kind())
        ),
        Arch::Sm100 if gemm.kind() == GemmKind::Gemm2 => format!(
            "{gemm} cuts N = {what} into {} × {n}-column tiles; its clusters need at least {cn}",
            cols.div_ceil(n)
        ),
        Arch::Sm100 => format!(
            "{gemm} cuts N = {what} into {} × {n}-column tiles; its clusters need a positive \
             multiple of {cn}",
            cols.div_ceil(n)
        ),
    };
    if let Some(next) = next {
        s.push_str(&format!(" (the next {dim} it serves: {next})"));
    }
    s
}

/// The PTX target whose GEMM rules (K-stage multiple, resource model) a generation's
/// kernels follow: sm_100a's equal sm_100f's.
pub(crate) fn shape_target(arch: Arch) -> Target {
    match arch {
        Arch::Sm100 => Target::Sm100f,
        Arch::Sm90 => Target::Sm90a,
    }
}

/// The N-dimension refusal of `g` for a layer dimension `value` (`dim` names it; GEMM1's N
/// is twice it), with the next value it serves when one lies within 64 K stages.
pub(crate) fn cover(g: &GemmTactic, dim: &'static str, value: u64) -> Result<(), Rejection> {
    cover_rows(g, dim, value, 2)
}

/// [`cover`] for a GEMM1 of `rows_per_column` W1 rows per h column (2 gated, 1 for ReLU²).
pub(crate) fn cover_rows(
    g: &GemmTactic,
    dim: &'static str,
    value: u64,
    rows_per_column: u64,
) -> Result<(), Rejection> {
    let rows_per_value = match g.kind() {
        GemmKind::Gemm1 => rows_per_column,
        GemmKind::Gemm2 => 1,
    };
    let n_of = |v: u64| v.saturating_mul(rows_per_value);
    if g.fits_n(n_of(value)) {
        return Ok(());
    }
    let step = gemm_shape_multiple(shape_target(g.arch()));
    let first = (value / step + 1) * step;
    let next = (0..64).map(|i| first + i * step).find(|&v| g.fits_n(n_of(v)));
    Err(Rejection::NotCovered { gemm: *g, dim, value, rows_per_value, next })
}

/// A tactic and why it cannot run the layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The tactic.
    pub tactic: MoeTactic,
    /// The first reason found (kernels first, then the shape).
    pub reason: Rejection,
}

/// The tactic space of one generation sorted into what a kernel set can run for a layer and
/// what it cannot, with the reason for each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateReport {
    /// The device generation whose tactic space was considered.
    pub arch: Arch,
    /// The tactics that apply, in the tactic space's order.
    pub accepted: Vec<MoeTactic>,
    /// The others.
    pub rejected: Vec<Rejected>,
}

impl CandidateReport {
    /// Sorts every tactic of `arch`'s space for a layer of `config` with weights in
    /// `format` and up to `max_tokens` tokens per pass.
    pub fn new(
        config: &LayerConfig,
        kernels: &KernelSet,
        max_tokens: u64,
        arch: Arch,
        format: WeightFormat,
    ) -> Self {
        let mut report = Self { arch, accepted: Vec::new(), rejected: Vec::new() };
        for tactic in tactics_for(arch) {
            match check(config, kernels, max_tokens, format, &tactic) {
                Ok(()) => report.accepted.push(tactic),
                Err(reason) => report.rejected.push(Rejected { tactic, reason }),
            }
        }
        report
    }

    /// The accepted tactics, or when there are none the error that says why each was not.
    pub fn into_result(self) -> Result<Vec<MoeTactic>, NoCandidates> {
        if self.accepted.is_empty() {
            return Err(NoCandidates { arch: self.arch, rejected: self.rejected });
        }
        Ok(self.accepted)
    }
}

/// No tactic of the kernel set applies: every tactic of the generation's space, each with
/// its reason. Printed as counts per kind of reason, each with its first example.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoCandidates {
    /// The device generation.
    pub arch: Arch,
    /// Every tactic of its space, with its reason.
    pub rejected: Vec<Rejected>,
}

impl NoCandidates {
    /// Counts per kind of reason, in order of first appearance, with that first example.
    pub fn summary(&self) -> Vec<(&'static str, usize, &Rejected)> {
        let mut out: Vec<(&'static str, usize, &Rejected)> = Vec::new();
        for r in &self.rejected {
            match out.iter_mut().find(|(k, _, _)| *k == r.reason.kind()) {
                Some((_, n, _)) => *n += 1,
                None => out.push((r.reason.kind(), 1, r)),
            }
        }
        out
    }
}

impl std::error::Error for NoCandidates {}

impl fmt::Display for NoCandidates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} tactics considered", self.rejected.len(), self.arch)?;
        for (i, (kind, n, first)) in self.summary().into_iter().enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            let eg = if n > 1 { "e.g. " } else { "" };
            write!(f, "{sep}{n} × {kind} ({eg}{}: {})", first.tactic, first.reason)?;
        }
        Ok(())
    }
}

/// Why `tactic` cannot run the layer, if it cannot: its kernels first (what the user chose
/// to generate), then the layer's shape, then the token count.
fn check(
    config: &LayerConfig,
    kernels: &KernelSet,
    max_tokens: u64,
    format: WeightFormat,
    tactic: &MoeTactic,
) -> Result<(), Rejection> {
    for g in [Some(tactic.gemm1()), tactic.gemm1_wide(), Some(tactic.gemm2())].into_iter().flatten()
    {
        find_kernel(kernels, g, config, format)?;
    }
    let s = &config.shape;
    let target = shape_target(tactic.arch());
    check_gemm_dim(target, "hidden size", s.hidden as u64).map_err(Rejection::Shape)?;
    check_gemm_dim(target, "intermediate size", s.intermediate as u64).map_err(Rejection::Shape)?;
    let rows_per_column = if config.epilogue.activation.gated() { 2 } else { 1 };
    cover_rows(tactic.gemm1(), "intermediate size", s.intermediate as u64, rows_per_column)?;
    if let Some(w) = tactic.gemm1_wide() {
        cover_rows(w, "intermediate size", s.intermediate as u64, rows_per_column)?;
    }
    cover(tactic.gemm2(), "hidden size", s.hidden as u64)?;
    let short = |gemm: &GemmTactic, dim, value: u64| {
        if gemm.fits_k(value) { Ok(()) } else { Err(Rejection::ShortK { gemm: *gemm, dim, value }) }
    };
    short(tactic.gemm1(), "hidden size", s.hidden as u64)?;
    short(tactic.gemm2(), "intermediate size", s.intermediate as u64)?;
    let routes = max_tokens.saturating_mul(s.top_k() as u64);
    let tiles = max_tiles(routes, s.local_experts() as u64, u64::from(tactic.tile().rows()))
        .map_err(|source| Rejection::Tokens { max_tokens, source })?;
    if tiles == 0 {
        let source = PlanError::Zero { what: "routing tiles" };
        return Err(Rejection::Tokens { max_tokens, source });
    }
    Ok(())
}

/// The key the layer needs for `g` on `target`.
pub(crate) fn gemm_key(
    g: &GemmTactic,
    c: &LayerConfig,
    format: WeightFormat,
    target: Target,
) -> Result<GemmKey, DescError> {
    let mut d = KernelDescBuilder::new(*g).target(target).format(format).activations(c.activations);
    d = match g.kind() {
        GemmKind::Gemm1 => {
            let d = d
                .swiglu_input(c.swiglu_input)
                .activation(c.epilogue.activation)
                .bias(c.epilogue.gemm1_bias);
            match c.recipe {
                Some(r) => d.recipe(r),
                None => d,
            }
        }
        GemmKind::Gemm2 => d.finalize(c.finalize).bias(c.epilogue.gemm2_bias),
    };
    d.build().map(|d| d.key())
}

/// The set's kernel for `g` under `c` on any target of `g`'s generation, or why there is
/// none: the first option in which every kernel of `g` the set holds differs.
pub(crate) fn find_kernel(
    kernels: &KernelSet,
    g: &GemmTactic,
    c: &LayerConfig,
    format: WeightFormat,
) -> Result<&'static KernelInfo, Rejection> {
    let mut wanted = None;
    let mut refused = None;
    for target in Target::ALL.into_iter().filter(|t| t.arch() == g.arch()) {
        match gemm_key(g, c, format, target) {
            Ok(key) => {
                if let Some(k) = kernels.find_gemm(&key) {
                    return Ok(k);
                }
                wanted = wanted.or(Some(key));
            }
            Err(source) => {
                refused = refused.or(Some(Rejection::Refused { gemm: *g, target, source }))
            }
        }
    }
    let Some(wanted) = wanted else {
        return Err(refused.unwrap_or(Rejection::NotInSet { gemm: *g }));
    };
    let gemms: Vec<GemmKey> = kernels
        .kernels()
        .iter()
        .filter_map(|k| match k.id {
            KernelId::Gemm(key) => Some(key),
            _ => None,
        })
        .collect();
    if !gemms.iter().any(|k| k.arch() == g.arch()) {
        let held = distinct(gemms.iter().map(GemmKey::arch));
        return Err(Rejection::OtherArch { arch: g.arch(), held });
    }
    let mut same: Vec<GemmKey> =
        gemms.into_iter().filter(|k| k.tactic().is_ok_and(|t| t == *g)).collect();
    if same.is_empty() {
        return Err(Rejection::NotInSet { gemm: *g });
    }
    // Narrow option by option; the first that leaves nothing is the reason.
    macro_rules! narrow {
        ($field:ident, $variant:ident) => {
            let present = distinct(same.iter().map(|k| k.$field));
            same.retain(|k| k.$field == wanted.$field);
            if same.is_empty() {
                return Err(Rejection::$variant { gemm: *g, wanted: wanted.$field, present });
            }
        };
    }
    narrow!(format, Format);
    narrow!(activations, Activations);
    match g.kind() {
        GemmKind::Gemm1 => {
            narrow!(swiglu_input, SwigluInput);
            narrow!(recipe, Recipe);
            narrow!(activation, Activation);
            narrow!(bias, Bias);
        }
        GemmKind::Gemm2 => {
            narrow!(finalize, Finalize);
            narrow!(bias, Bias);
        }
    }
    Err(Rejection::NotInSet { gemm: *g })
}

fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}
