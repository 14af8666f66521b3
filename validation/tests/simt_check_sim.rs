//! gpu-check's SIMT cases that are small enough to simulate, run with a simulator standing in
//! for the device: each must equal its CPU counterpart byte for byte on both kernel flavours,
//! so a case gpu-check reports unequal on the GPU is the GPU's, not the case's.

use moegen_dsl::abi::SimtTarget;
use moegen_validation::simt_check::{CASES, SimtCase, check, label, simulator_for};

fn run(filter: impl Fn(SimtCase) -> bool) {
    for target in [SimtTarget::Sm90a, SimtTarget::Sm100f] {
        for &(case, simulate) in CASES {
            if !simulate || !filter(case) {
                continue;
            }
            let mut sim = simulator_for(target);
            let row = check(&mut sim, case, false).unwrap_or_else(|e| panic!("{target:?}: {e}"));
            assert!(row.device_equal, "{target:?} {}: simulator differs from the CPU", label(case));
            assert_eq!(row.sim_equal, None);
        }
    }
}

#[test]
fn expert_parallel_exchange_cases_equal_the_cpu() {
    run(|c| matches!(c, SimtCase::EpExchange(..)));
}
