//! The asynchronous rules of wgmma (PTX ISA "wgmma.fence", "wgmma.wait_group"): accesses to
//! an in-flight wgmma's registers or shared memory, missing fences, split warpgroups; the
//! GMMA shared-memory descriptor, bit by bit; setmaxnreg.

mod common;

use common::{Case, Hooks, Rng, expected, run_hooked};
use moegen_sim::{Device, LaunchConfig, SimError, launch, parse_module};

fn case(n: usize, a_regs: bool) -> Case {
    Case::new(n, a_regs, &mut Rng(77))
}

fn hooked(c: &Case, h: Hooks) -> Result<Vec<u32>, SimError> {
    run_hooked(c, &h)
}

/// The detail of a WgmmaHazard, or what else happened.
fn hazard(r: Result<Vec<u32>, SimError>) -> String {
    match r {
        Err(SimError::WgmmaHazard { detail, .. }) => detail,
        Err(e) => format!("other error: {e}"),
        Ok(_) => "ok".into(),
    }
}

#[test]
fn results_are_unreadable_until_waited() {
    let c = case(16, true);
    let no_wait = Hooks { wait: Some(String::new()), ..Hooks::default() };
    let e = hazard(hooked(&c, no_wait));
    assert!(e.contains("accesses %f0 (the accumulator of the wgmma at line"), "{e}");
    // wait_group 1 leaves the only group in flight.
    let wait1 =
        Hooks { wait: Some("\twgmma.wait_group.sync.aligned 1;\n".into()), ..Hooks::default() };
    assert!(hazard(hooked(&c, wait1)).contains("before a wgmma.wait_group"));
    // Read before commit.
    let early = Hooks { after_mma: "\tmov.b32 %r10, %f3;\n".into(), ..Hooks::default() };
    assert!(hazard(hooked(&c, early)).contains("accesses %f3"));
    // A wait for a later empty group completes the earlier one.
    let two = Hooks {
        after_commit: "\twgmma.commit_group.sync.aligned;\n".into(),
        wait: Some("\twgmma.wait_group.sync.aligned 1;\n".into()),
        ..Hooks::default()
    };
    assert_eq!(hooked(&c, two).unwrap(), expected(&c));
}

#[test]
fn fences_are_required() {
    let c = case(8, true);
    let none = Hooks { fence: Some(String::new()), ..Hooks::default() };
    assert!(hazard(hooked(&c, none)).contains("no wgmma.fence before the first"));
    for (reg, what) in [("%a2", "A fragment"), ("%f1", "accumulator")] {
        let h = Hooks { after_fence: format!("\tmov.b32 {reg}, {reg};\n"), ..Hooks::default() };
        let e = hazard(hooked(&c, h));
        assert!(e.contains(&format!("{reg} was accessed at line")), "{what}: {e}");
    }
    // A fence after the access makes it legal again.
    let refenced = Hooks {
        after_fence: "\tmov.b32 %f1, %f1;\n\twgmma.fence.sync.aligned;\n".into(),
        ..Hooks::default()
    };
    assert_eq!(hooked(&c, refenced).unwrap(), expected(&c));
}

#[test]
fn in_flight_operands_must_not_change() {
    let c = case(8, true);
    let a = Hooks { after_commit: "\tadd.u32 %a1, %a1, 1;\n".into(), ..Hooks::default() };
    assert!(hazard(hooked(&c, a)).contains("accesses %a1 (the A fragment"));
    let b =
        Hooks { after_commit: "\tst.shared.u32 [%r2+16384], %r0;\n".into(), ..Hooks::default() };
    let e = hazard(hooked(&c, b));
    assert!(e.contains("writes shared byte 0x4000, which the wgmma at line"), "{e}");
    // Bytes it does not read may be written; after the wait, any may.
    let elsewhere = Hooks {
        after_commit: "\tst.shared.u32 [%r2+52000], %r0;\n".into(),
        after_wait: "\tst.shared.u32 [%r2+16384], %r0;\n".into(),
        ..Hooks::default()
    };
    assert_eq!(hooked(&c, elsewhere).unwrap(), expected(&c));
    // A from shared memory is protected too.
    let c = case(8, false);
    let a = Hooks { after_mma: "\tst.shared.u32 [%r2+128], %r0;\n".into(), ..Hooks::default() };
    assert!(hazard(hooked(&c, a)).contains("writes shared byte 0x80"));
}

#[test]
fn chained_wgmmas_follow_the_ordering_rules() {
    let c = case(16, true);
    let again = "\twgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, {%a0, %a1, %a2, %a3}, %rd5, 1, 1, 1, 0;\n";
    // Same accumulator, same shape: ordered without a fence; the second adds to the first.
    let chained = hooked(&c, Hooks { after_mma: again.into(), ..Hooks::default() }).unwrap();
    let mut twice = case(16, true);
    twice.c = vec![vec![0; 16]; 64];
    let first = expected(&c);
    for (j, v) in first.iter().enumerate() {
        let (row, col) = common::d_position(j / 8, j % 8);
        twice.c[row][col] = *v;
    }
    twice.scale_d = "1";
    assert_eq!(chained, expected(&twice));
    // The same A fragment feeding a second accumulator in flight: allowed.
    let shared_a = "\twgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f8, %f9, %f10, %f11}, {%a0, %a1, %a2, %a3}, %rd5, 0, 1, 1, 0;\n";
    assert!(hooked(&c, Hooks { after_mma: shared_a.into(), ..Hooks::default() }).is_ok());
    // Another shape on the same registers, or an accumulator reused as A: refused.
    let other_shape = "\twgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, {%a0, %a1, %a2, %a3}, %rd5, 1, 1, 1, 0;\n";
    let e = hazard(hooked(&c, Hooks { after_mma: other_shape.into(), ..Hooks::default() }));
    assert!(e.contains("%f0 is in use by the in-flight wgmma at line"), "{e}");
    let d_as_a = "\twgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f8, %f9, %f10, %f11}, {%f0, %f1, %f2, %f3}, %rd5, 0, 1, 1, 0;\n";
    let e = hazard(hooked(&c, Hooks { after_mma: d_as_a.into(), ..Hooks::default() }));
    assert!(e.contains("%f0 is in use"), "{e}");
}

#[test]
fn the_warpgroup_executes_together() {
    let c = case(8, true);
    let msg = |r: Result<Vec<u32>, SimError>| match r {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    let half_warp = Hooks {
        fence: Some("\tsetp.lt.u32 %p2, %r0, 16;\n\t@%p2 wgmma.fence.sync.aligned;\n".into()),
        ..Hooks::default()
    };
    assert!(msg(hooked(&c, half_warp)).contains("warp 0 is not converged: 16 of its 32 lanes"));
    let two_warps = Hooks {
        fence: Some("\tsetp.lt.u32 %p2, %r0, 64;\n\t@%p2 wgmma.fence.sync.aligned;\n".into()),
        ..Hooks::default()
    };
    assert!(msg(hooked(&c, two_warps)).contains("warpgroup 0 is split"));
    let uneven = Hooks {
        after_fence: "\tsetp.eq.u32 %p3, %r0, 77;\n\t@%p3 add.u64 %rd5, %rd5, 2;\n".into(),
        ..Hooks::default()
    };
    assert!(msg(hooked(&c, uneven)).contains("b-desc differs across the warpgroup (thread 77)"));
    let small = Hooks { threads: Some(96), ..Hooks::default() };
    assert!(msg(hooked(&c, small)).contains("warpgroup 0 is incomplete"));
    // Two warpgroups each run their own.
    let two = Hooks { threads: Some(256), ..Hooks::default() };
    assert_eq!(hooked(&c, two).unwrap(), expected(&c));
}

/// The field a descriptor error names (prefixed by the descriptor), "differs" when the
/// result changed, "oob" for an access outside shared memory, "same" otherwise.
fn outcome(c: &Case, h: Hooks) -> String {
    match hooked(c, h) {
        Err(SimError::Descriptor { descriptor, field, .. }) => format!("{descriptor}: {field}"),
        Err(SimError::SharedOutOfBounds { .. }) => "oob".into(),
        Err(e) => format!("other error: {e}"),
        Ok(got) if got != expected(c) => "differs".into(),
        Ok(_) => "same".into(),
    }
}

#[test]
fn every_descriptor_bit_is_modelled_or_refused() {
    let c = case(64, false);
    let fixed = |bit: u32| -> Option<&'static str> {
        Some(match bit {
            // 16-byte start offsets 16, 32, 64 keep the K step inside the first row.
            3..=5 => "start address (bits 0-13)",
            14 | 15 => "reserved bits 14-15",
            16..=29 => "LBO (bits 16-29)",
            30 | 31 => "reserved bits 30-31",
            32..=37 => "SBO (bits 32-45)",
            46..=48 => "reserved bits 46-48",
            49..=51 => "base offset (bits 49-51)",
            52..=61 => "reserved bits 52-61",
            _ => return None,
        })
    };
    for bit in 0..64u32 {
        for which in ["A", "B"] {
            let mut h = Hooks::default();
            if which == "A" {
                h.adesc = Some(c.adesc() ^ (1 << bit));
            } else {
                h.bdesc = Some(c.bdesc() ^ (1 << bit));
            }
            let got = outcome(&c, h);
            match fixed(bit) {
                Some(field) => assert_eq!(got, format!("{which}: {field}"), "{which} bit {bit}"),
                // The start address, SBO and the layout are modelled: another value reads
                // other bytes.
                None => assert!(got == "differs" || got == "oob", "{which} bit {bit}: {got}"),
            }
        }
    }
}

fn setmaxnreg(body: &str, threads: u32) -> Result<(), SimError> {
    setmaxnreg_with(body, threads, "")
}

fn setmaxnreg_with(body: &str, threads: u32, directives: &str) -> Result<(), SimError> {
    let text = format!(
        ".version 8.8\n.target sm_90a\n.address_size 64\n.visible .entry k(\n)\n{directives}{{\n\t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\tmov.u32 %r0, %tid.x;\n{body}\n\tret;\n}}\n"
    );
    let m = parse_module(&text)?;
    launch(&mut Device::new(), &m, "k", &LaunchConfig::new(1, threads, 0), &[]).map(|_| ())
}

#[test]
fn setmaxnreg_is_a_warpgroup_check() {
    let roles = "\tsetp.lt.u32 %p0, %r0, 128;\n\t@%p0 bra PRODUCER;\n\tsetmaxnreg.inc.sync.aligned.u32 232;\n\tbra.uni END;\nPRODUCER:\n\tsetmaxnreg.dec.sync.aligned.u32 40;\nEND:";
    assert_eq!(setmaxnreg(roles, 256), Ok(()));
    let e = setmaxnreg(
        "\tsetmaxnreg.dec.sync.aligned.u32 40;\n\tsetmaxnreg.dec.sync.aligned.u32 56;",
        128,
    );
    assert!(e.unwrap_err().to_string().contains("cannot lower the register count from 40 to 56"));
    let e = setmaxnreg("\tsetmaxnreg.inc.sync.aligned.u32 100;", 128);
    assert!(matches!(e, Err(SimError::BadInstruction { .. })), "not a multiple of 8: {e:?}");
    // One warp alone never completes the warpgroup.
    let e = setmaxnreg(
        "\tsetp.lt.u32 %p0, %r0, 32;\n\t@!%p0 bra END;\n\tsetmaxnreg.dec.sync.aligned.u32 40;\nEND:\n\tbar.sync 0;",
        128,
    );
    assert!(matches!(e, Err(SimError::Deadlock { .. })), "{e:?}");
    // With .maxnreg the CTA's pool is modelled: the consumers' .inc waits for the
    // producer's .dec (here the consumers come first), and asking for more than was given
    // never completes.
    let split = |consumer: u32| {
        format!(
            "\tsetp.lt.u32 %p0, %r0, 128;\n\t@!%p0 bra CONSUMER;\n\tmov.u32 %r1, 0;\nSPIN:\n\tadd.u32 %r1, %r1, 1;\n\tsetp.lt.u32 %p1, %r1, 300;\n\t@%p1 bra SPIN;\n\tsetmaxnreg.dec.sync.aligned.u32 40;\n\tbra.uni END;\nCONSUMER:\n\tsetmaxnreg.inc.sync.aligned.u32 {consumer};\nEND:"
        )
    };
    assert_eq!(setmaxnreg_with(&split(232), 384, ".maxnreg 168\n"), Ok(()));
    let e = setmaxnreg_with(&split(240), 384, ".maxnreg 168\n");
    assert!(matches!(e, Err(SimError::Deadlock { .. })), "{e:?}");
    let e = setmaxnreg_with("\tsetmaxnreg.dec.sync.aligned.u32 176;", 128, ".maxnreg 168\n");
    assert!(e.unwrap_err().to_string().contains("cannot lower the register count from 168 to 176"));
}
