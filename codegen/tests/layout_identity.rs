//! The layouts derive from the kernel's key: every number they carry is the key's (or the
//! key's roles and budget), for every GEMM of the full kernel set.

use moegen_codegen::kernel_set::{KernelSetSpec, gemm_descs};
use moegen_codegen::kernels::sm90::layout::Sm90Layout;
use moegen_codegen::kernels::sm100::layout::Sm100Layout;
use moegen_dsl::abi::roles::{gemm_roles, sm90_roles};
use moegen_dsl::{Arch, Target};

#[test]
fn layouts_derive_from_the_key() {
    let descs = gemm_descs(&KernelSetSpec::full(Target::Sm100f)).unwrap();
    let (mut sm100, mut sm90) = (0, 0);
    for d in &descs {
        let k = d.key();
        match k.arch() {
            Arch::Sm100 => {
                sm100 += 1;
                let l = Sm100Layout::new(d);
                assert_eq!(l.key, k);
                assert_eq!(l.name(), k.name());
                assert_eq!((l.kind, l.tile, l.n), (k.gemm, k.tile.rows(), k.mma_n), "{}", k.name());
                assert_eq!((l.cm, l.cn), (k.cta_group(), k.cluster_n), "{}", k.name());
                assert_eq!(l.cm * l.cn, k.cluster_ctas());
                assert_eq!(&l.budget, d.budget());
                assert_eq!((l.budget.ab_stages, l.budget.acc_stages), (k.ab_stages, k.acc_stages));
                let r = gemm_roles(&k);
                assert_eq!((l.warps, l.mma_warp, l.tma_warp), (r.warps, r.mma_warp, r.tma_warp));
                assert_eq!(l.relay_warp, r.relay_warp);
            }
            Arch::Sm90 => {
                sm90 += 1;
                let l = Sm90Layout::new(d);
                assert_eq!(l.key, k);
                assert_eq!(l.name(), k.name());
                assert_eq!((l.kind, l.tile, l.n), (k.gemm, k.tile.rows(), k.mma_n), "{}", k.name());
                assert_eq!(&l.budget, d.budget());
                let r = sm90_roles(&k);
                assert_eq!((l.consumers, l.threads), (r.consumers, r.warps * 32), "{}", k.name());
                // The consumers split a unit's rows, or (ping-pong) each takes whole units.
                assert_eq!(l.parts * l.rows_per_consumer, l.n, "{}", k.name());
                assert_eq!(l.pingpong, k.schedule == moegen_dsl::Schedule::PingPong);
                assert_eq!(l.parts, if l.pingpong { 1 } else { l.consumers }, "{}", k.name());
            }
        }
    }
    assert!(sm100 > 0 && sm90 > 0, "{sm100} SM100 and {sm90} Hopper GEMMs");
}
