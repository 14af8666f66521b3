//! The GPUs moegen models, one description each: the published throughput figures that both
//! the runtime's dispatch estimate (`moegen_runtime::layer::DeviceModel`) and codegen's
//! analytic per-role model (`moegen_codegen::perf::model::Machine`) build on, so that the two
//! cannot disagree about the machine.

use crate::tactic::Arch;

/// One GPU's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    /// SMs.
    pub sms: u32,
    /// Clock (GHz).
    pub clock_ghz: f64,
    /// Dense MACs per clock per SM at the MMA's operand types (block-scaled FP4 on SM100,
    /// bf16 on Hopper).
    pub macs_per_clock_per_sm: f64,
    /// HBM bandwidth (bytes/s).
    pub hbm_bytes_per_s: f64,
    /// Fraction of it a streaming kernel achieves.
    pub hbm_efficiency: f64,
    /// Launch, prologue and pipeline fill of one kernel (µs).
    pub launch_us: f64,
    /// SMs of each GPC, where the model assumes a layout: a cluster's CTAs run on one GPC,
    /// so clusters pack per GPC ([`Gpu::resident_clusters`]). `None`: the SMs as one pool.
    pub gpc_sms: Option<&'static [u32]>,
    /// Clusters the driver reported running at once on this part, which
    /// [`Gpu::resident_clusters`] answers before the GPC bound.
    pub measured_clusters: &'static [MeasuredClusters],
}

/// One count the driver gave (`cuOccupancyMaxActiveClusters`, gpu-check's clusters part):
/// `clusters` clusters of `cluster` CTAs at once at `ctas_per_sm` CTAs per SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeasuredClusters {
    /// CTAs per SM the kernel's resources allow.
    pub ctas_per_sm: u32,
    /// CTAs per cluster.
    pub cluster: u32,
    /// Clusters the driver runs at once.
    pub clusters: u32,
}

/// The counts an H100 SXM's driver gave for moegen's split-K GEMMs (132 SMs, driver
/// 580.159.04; docs/validation.md, 2026-12-07 session 15): clusters of 2 fill every slot, as
/// the GPC layout says; clusters of 4 run 92, six fewer than [`GH100_132_GPC_SMS`] packs. The
/// H200 is the same GH100 die with 132 SMs; which TPCs a chip has enabled varies, so these are
/// one chip's figures until an H200's are recorded.
pub const GH100_132_MEASURED_CLUSTERS: [MeasuredClusters; 2] = [
    MeasuredClusters { ctas_per_sm: 3, cluster: 2, clusters: 198 },
    MeasuredClusters { ctas_per_sm: 3, cluster: 4, clusters: 92 },
];

impl Gpu {
    /// B200 as ../shared/anchors.md §A2 states it: 148 SMs, 1.9 GHz, 16384 FP4 MAC/clk/SM
    /// (≈ 9.2 PFLOP/s), HBM 8 TB/s × 0.9, 2 µs fixed per kernel.
    pub const B200: Gpu = Gpu {
        sms: 148,
        clock_ghz: 1.9,
        macs_per_clock_per_sm: 16384.0,
        hbm_bytes_per_s: 8.0e12,
        hbm_efficiency: 0.9,
        launch_us: 2.0,
        // Its only clusters are CTA pairs, which a GPC of whole TPCs always packs.
        gpc_sms: None,
        measured_clusters: &[],
    };

    /// H200: 132 SMs, 1.83 GHz, 2048 dense bf16 MAC/clk/SM (989 TFLOP/s), HBM 4.8 TB/s × 0.9,
    /// 2 µs fixed per kernel; [`GH100_132_GPC_SMS`] for its GPCs and
    /// [`GH100_132_MEASURED_CLUSTERS`] for the counts a driver gave.
    pub const H200: Gpu = Gpu {
        sms: 132,
        clock_ghz: 1.83,
        macs_per_clock_per_sm: 2048.0,
        hbm_bytes_per_s: 4.8e12,
        hbm_efficiency: 0.9,
        launch_us: 2.0,
        gpc_sms: Some(&GH100_132_GPC_SMS),
        measured_clusters: &GH100_132_MEASURED_CLUSTERS,
    };

    /// The GPU moegen models for a generation: the B200 for SM100, the H200 for Hopper.
    pub const fn for_arch(arch: Arch) -> Gpu {
        match arch {
            Arch::Sm100 => Gpu::B200,
            Arch::Sm90 => Gpu::H200,
        }
    }

    /// Achievable HBM bandwidth (bytes/s): the bandwidth at the streaming efficiency.
    pub fn achievable_hbm_bytes_per_s(&self) -> f64 {
        self.hbm_bytes_per_s * self.hbm_efficiency
    }

    /// The same GPU with `sms` SMs; the GPC layout stays only if it holds that many SMs, and
    /// the measured cluster counts only for the same count (another count is another part,
    /// whose layout and counts the model does not know).
    pub fn with_sms(mut self, sms: u32) -> Gpu {
        let sms = sms.max(1);
        if self.gpc_sms.is_some_and(|g| g.iter().sum::<u32>() != sms) {
            self.gpc_sms = None;
        }
        if sms != self.sms {
            self.measured_clusters = &[];
        }
        self.sms = sms;
        self
    }

    /// Clusters of `cluster` CTAs the GPU runs at once at `ctas_per_sm` CTAs per SM (at
    /// least 1): the driver's count where one was recorded ([`Gpu::measured_clusters`]),
    /// otherwise the GPC bound. A cluster's CTAs share a GPC, so each GPC holds ⌊its SMs ×
    /// `ctas_per_sm` / `cluster`⌋ and the CTA slots left over in a GPC hold none. A
    /// persistent grid of more clusters leaves the rest waiting for a second wave.
    pub fn resident_clusters(&self, ctas_per_sm: u32, cluster: u32) -> u32 {
        let (per_sm, size) = (ctas_per_sm.max(1), cluster.max(1));
        let measured =
            self.measured_clusters.iter().find(|m| m.ctas_per_sm == per_sm && m.cluster == size);
        if let Some(m) = measured {
            return m.clusters.max(1);
        }
        self.gpc_clusters(ctas_per_sm, cluster)
    }

    /// The GPC bound of [`Gpu::resident_clusters`], whatever was measured.
    pub fn gpc_clusters(&self, ctas_per_sm: u32, cluster: u32) -> u32 {
        let pool = [self.sms];
        clusters_on_gpcs(self.gpc_sms.unwrap_or(&pool), ctas_per_sm, cluster).max(1)
    }
}

/// Clusters of `cluster` CTAs that GPCs of `gpc_sms` SMs hold at once at `ctas_per_sm` CTAs
/// per SM, a cluster's CTAs on one GPC: Σ ⌊SMs × `ctas_per_sm` / `cluster`⌋ (0 and 1 count
/// as 1). A bound from whole CTA slots; hardware may hold fewer ([`GH100_132_GPC_SMS`]).
pub fn clusters_on_gpcs(gpc_sms: &[u32], ctas_per_sm: u32, cluster: u32) -> u32 {
    let (per_sm, cluster) = (ctas_per_sm.max(1), cluster.max(1));
    gpc_sms.iter().map(|&s| s.saturating_mul(per_sm) / cluster).sum()
}

/// The GPCs of a 132-SM GH100 (H100 SXM, H200) as the model assumes them. The die has 8 GPCs
/// of 9 TPCs (two SMs each); 66 TPCs stay enabled, and which ones varies from chip to chip.
/// An odd TPC count leaves a GPC at 2 mod 4 SMs, and 66 TPCs over 8 GPCs of at most 9 need
/// at least two such GPCs: this layout, the most even, loses the fewest slots to clusters of
/// 4 (98 clusters at 3 CTAs per SM, not 99; 32 at 1, not 33). That is a bound, not the
/// hardware's rule: an H100's driver counted 92 clusters of 4 at 3 CTAs per SM (and 198 of 2,
/// as modelled; docs/validation.md, 2026-12-07 session 15), so the GPUs pack clusters of 4
/// less densely than whole CTA slots per GPC ([`GH100_132_MEASURED_CLUSTERS`], which the model
/// answers first). The runtime sizes its grids from the driver's count for the chip at hand
/// (`cuOccupancyMaxActiveClusters`).
pub const GH100_132_GPC_SMS: [u32; 8] = [18, 18, 16, 16, 16, 16, 16, 16];
