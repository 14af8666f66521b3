//! How many clusters a modelled GPU runs at once (`Gpu::resident_clusters`): a cluster's CTAs
//! share one GPC, so each GPC's CTA slots pack whole clusters and the rest stay empty.

use moegen_dsl::gpu::{GH100_132_GPC_SMS, GH100_132_MEASURED_CLUSTERS, Gpu};

#[test]
fn gh100_gpcs_hold_fewer_clusters_of_four_than_its_slots() {
    let h = Gpu::H200;
    assert_eq!(GH100_132_GPC_SMS.iter().sum::<u32>(), h.sms);
    // Clusters of 1 and 2 fill every slot (every GPC has an even SM count).
    assert_eq!(h.resident_clusters(3, 1), 396);
    assert_eq!(h.resident_clusters(3, 2), 198);
    assert_eq!(h.resident_clusters(1, 2), 66);
    // Clusters of 4: the two 18-SM GPCs each leave 2 slots (3 per SM) or 2 SMs (1 per SM).
    assert_eq!(h.gpc_clusters(3, 4), 98);
    assert_eq!(h.resident_clusters(1, 4), 32);
    assert_eq!(h.resident_clusters(2, 4), 66);
}

#[test]
fn the_drivers_counts_come_before_the_gpc_bound_and_never_exceed_it() {
    let h = Gpu::H200;
    // An H100's driver ran 92 clusters of 4 at 3 CTAs per SM, where the layout packs 98.
    assert_eq!(h.resident_clusters(3, 4), 92);
    assert_eq!(h.resident_clusters(3, 2), 198);
    for m in GH100_132_MEASURED_CLUSTERS {
        assert_eq!(h.resident_clusters(m.ctas_per_sm, m.cluster), m.clusters);
        assert!(m.clusters <= h.gpc_clusters(m.ctas_per_sm, m.cluster), "{m:?}");
    }
    // Another SM count is another part: neither its layout nor its counts are known.
    let cut = h.with_sms(114);
    assert!(cut.measured_clusters.is_empty());
    assert_eq!(cut.resident_clusters(3, 4), 85);
    assert_eq!(h.with_sms(132).measured_clusters, &GH100_132_MEASURED_CLUSTERS[..]);
}

#[test]
fn any_132_sm_gh100_layout_loses_a_cluster_of_four() {
    // 66 TPCs over 8 GPCs of at most 9: every such layout leaves at least two GPCs at an odd
    // TPC count, so none holds 99 clusters of 4 at 3 CTAs per SM, and the model's layout
    // loses the fewest.
    let mut best = 0;
    let mut layouts = 0;
    let mut tpcs = [0u32; 8];
    fn walk(i: usize, left: u32, tpcs: &mut [u32; 8], f: &mut dyn FnMut(&[u32; 8])) {
        if i == 8 {
            if left == 0 {
                f(tpcs);
            }
            return;
        }
        // The GPCs after this one hold at most 9 TPCs each: leave them no more.
        let rest = 9 * (7 - i as u32);
        for t in left.saturating_sub(rest)..=left.min(9) {
            tpcs[i] = t;
            walk(i + 1, left - t, tpcs, f);
        }
    }
    walk(0, 66, &mut tpcs, &mut |t| {
        layouts += 1;
        let held: u32 = t.iter().map(|&n| 2 * n * 3 / 4).sum();
        assert!(held < 99, "{t:?}");
        best = best.max(held);
    });
    assert!(layouts > 0);
    assert_eq!(best, Gpu::H200.gpc_clusters(3, 4));
}

#[test]
fn a_gpu_without_a_layout_packs_all_its_sms_and_another_count_drops_the_layout() {
    assert_eq!(Gpu::B200.gpc_sms, None);
    assert_eq!(Gpu::B200.resident_clusters(1, 2), 74);
    let pcie = Gpu::H200.with_sms(114);
    assert_eq!(pcie.gpc_sms, None);
    assert_eq!(pcie.resident_clusters(3, 4), 85);
    assert_eq!(Gpu::H200.with_sms(132).gpc_sms, Some(&GH100_132_GPC_SMS[..]));
    // Never none: a persistent grid needs a cluster.
    assert_eq!(Gpu::H200.with_sms(2).resident_clusters(1, 4), 1);
}
