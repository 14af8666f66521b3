//! The kernels a layer may launch: the built-in set (moegen-kernels), or a build script's or
//! `moe_kernels!`'s.

use moegen_dsl::abi::{GemmKey, KernelId, KernelInfo};

/// A set of generated kernels, with a checksum that keys tuning results to it.
#[derive(Clone, Debug)]
pub struct KernelSet {
    kernels: Vec<&'static KernelInfo>,
    checksum: u64,
}

impl KernelSet {
    /// A set from any kernels (e.g. `kernels()` of an `include_kernels!` module).
    pub fn new(kernels: impl IntoIterator<Item = &'static KernelInfo>) -> Self {
        let kernels: Vec<_> = kernels.into_iter().collect();
        // FNV-1a over every name and PTX: a changed kernel invalidates cached tuning.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for k in &kernels {
            for byte in k.name.bytes().chain([0]).chain(k.ptx.bytes()) {
                h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        Self { kernels, checksum: h }
    }

    /// The kernels of moegen-kernels the enabled features include.
    pub fn builtin() -> Self {
        Self::new(moegen_kernels::kernels())
    }

    /// The kernel with identity `id`.
    pub fn find(&self, id: &KernelId) -> Option<&'static KernelInfo> {
        self.kernels.iter().copied().find(|k| k.id == *id)
    }

    /// The GEMM kernel with key `key` up to its pipeline depths: the resource model's depths
    /// when the set holds them, otherwise the set's one build of it with overridden depths
    /// (a build script or `moe_kernels!` may generate a GEMM with chosen stage counts; the
    /// launch reads its shared memory from the kernel, so any depth runs).
    pub fn find_gemm(&self, key: &GemmKey) -> Option<&'static KernelInfo> {
        let same = |k: &GemmKey| {
            let strip =
                |k: &GemmKey| GemmKey { ab_stages: 0, acc_stages: 0, planned_depths: true, ..*k };
            strip(k) == strip(key)
        };
        let mut any = None;
        for k in &self.kernels {
            if let KernelId::Gemm(g) = &k.id
                && same(g)
            {
                if g.planned_depths {
                    return Some(k);
                }
                any = any.or(Some(*k));
            }
        }
        any
    }

    /// Every kernel.
    pub fn kernels(&self) -> &[&'static KernelInfo] {
        &self.kernels
    }

    /// FNV-1a of the kernels' names and PTX.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
}
