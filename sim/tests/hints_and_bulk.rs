//! Cache hints and prefetches are accepted and change nothing; 1-D bulk copies global →
//! shared complete on their mbarrier (unicast and multicast) and are unreadable before it.

use moegen_sim::{
    Arg, Device, LaunchConfig, SimError, TensorMap, TmaDataType, launch, parse_module,
};

const HEADER: &str =
    ".version 8.8\n.target sm_90a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n";

fn run(body: &str, cluster: u32) -> Result<Vec<u8>, SimError> {
    let text = format!(
        "{HEADER}.visible .entry k(\n.param .align 64 .b8 tmap[128],\n.param .u64 inp,\n.param .u64 out\n)\n{}{{\n\
         \t.reg .pred %p<4>;\n\t.reg .b32 %r<16>;\n\t.reg .b64 %rd<16>;\n\
         \tmov.u32 %r0, %tid.x;\n\tmov.u32 %r1, smem;\n\tld.param.u64 %rd0, [inp];\n\tld.param.u64 %rd1, [out];\n\
         \tmov.u64 %rd2, tmap;\n\tmov.u32 %r15, %cluster_ctarank;\n{body}\n\tret;\n}}\n",
        if cluster > 1 { format!(".reqnctapercluster {cluster}, 1, 1\n") } else { String::new() }
    );
    let m = parse_module(&text)?;
    let mut dev = Device::new();
    let inp = dev.upload(&(0..=255u8).cycle().take(4096).collect::<Vec<u8>>());
    let out = dev.alloc(256 * cluster as usize);
    let map = TensorMap {
        dtype: TmaDataType::U8,
        address: inp,
        dims: vec![64, 64],
        strides: vec![64],
        box_dims: vec![64, 4],
        swizzle: 0,
    };
    let bytes = map.encode().map(|b| b.to_vec()).unwrap_or_default();
    let mut cfg = LaunchConfig::new(cluster, 32, 4096);
    cfg.cluster = cluster;
    launch(&mut dev, &m, "k", &cfg, &[Arg::Bytes(bytes), Arg::U64(inp), Arg::U64(out)])?;
    Ok(dev.download(out, 256 * cluster as usize).unwrap_or_default())
}

#[test]
fn hints_have_no_effect() {
    let body = "
	createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %rd3, 1.0;
	createpolicy.fractional.L2::evict_first.b64 %rd4;
	prefetch.global.L2 [%rd0];
	prefetch.global.L2::evict_last [%rd0+4096];
	prefetch.tensormap [%rd2];
	prefetch.param.tensormap [%rd2];
	cp.async.bulk.prefetch.L2.global [%rd0], 256;
	cp.async.bulk.prefetch.L2.global.L2::cache_hint [%rd0], 256, %rd3;
	cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd2, {0, 62}];
	ld.global.L1::evict_last.L2::128B.u32 %r2, [%rd0+4];
	ld.global.L2::cache_hint.v2.u32 {%r3, %r4}, [%rd0+8], %rd3;
	mul.lo.u32 %r5, %r0, 16;
	cvt.u64.u32 %rd5, %r5;
	add.u64 %rd6, %rd0, %rd5;
	add.u32 %r6, %r1, %r5;
	mul.wide.u32 %rd5, %r0, 4;
	cp.async.cg.shared.global.L2::128B [%r6], [%rd6], 16;
	cp.async.ca.shared.global.L2::256B.L2::cache_hint [%r6+512], [%rd6], 4, %rd4;
	cp.async.wait_all;
	ld.shared.u32 %r7, [%r6];
	ld.shared.u32 %r8, [%r6+512];
	add.u64 %rd7, %rd1, %rd5;
	xor.b32 %r8, %r8, %r7;
	xor.b32 %r8, %r8, %r7;
	st.global.L1::no_allocate.L2::cache_hint.u32 [%rd7], %r8, %rd4;
	setp.eq.u32 %p0, %r0, 0;
	@%p0 st.global.v4.u32 [%rd1+128], {%r2, %r3, %r4, %r7};";
    let out = run(body, 1).unwrap();
    let word = |i: usize| u32::from_le_bytes([out[i], out[i + 1], out[i + 2], out[i + 3]]);
    let input = |i: usize| u32::from_le_bytes([i as u8, i as u8 + 1, i as u8 + 2, i as u8 + 3]);
    for t in 0..32 {
        assert_eq!(word(4 * t), input(16 * t), "thread {t}");
    }
    assert_eq!(
        [word(128), word(132), word(136), word(140)],
        [input(4), input(8), input(12), input(0)]
    );
    // The .ca copy (4 bytes) landed too.
    let ca = run(
        &body.replace(
            "ld.shared.u32 %r8, [%r6+512];",
            "ld.shared.u32 %r8, [%r6+512];\n\tmov.u32 %r7, 0;",
        ),
        1,
    )
    .unwrap();
    assert_eq!(ca[..4], input(0).to_le_bytes());
    assert_eq!(
        run("\tcreatepolicy.fractional.L2::evict_last.b64 %rd3;\n\tst.global.u64 [%rd1], %rd3;", 1)
            .unwrap()[..8],
        0x5349_4D00_C0DE_0000u64.to_le_bytes()
    );
    let bad_map = run("\tprefetch.tensormap [%rd2+8];", 1).unwrap_err();
    assert!(bad_map.to_string().contains("holds no tensor map"), "{bad_map}");
    let bad_size = run("\tcp.async.bulk.prefetch.L2.global [%rd0], 24;", 1).unwrap_err();
    assert!(bad_size.to_string().contains("multiple of 16"), "{bad_size}");
}

/// Thread 0 of each CTA copies 256 bytes of the input into shared memory with a bulk copy
/// completing on the barrier at 2048, waits, and writes them out.
fn bulk(copy: &str, wait: bool, cluster: u32) -> Result<Vec<u8>, SimError> {
    run(&bulk_body(copy, wait), cluster)
}

fn bulk_body(copy: &str, wait: bool) -> String {
    let wait = if wait {
        "WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1+2048], 0;\n\t@!%p1 bra WAIT;\n"
    } else {
        ""
    };
    format!(
        "\tsetp.eq.u32 %p0, %r0, 0;\n\t@%p0 mbarrier.init.shared::cta.b64 [%r1+2048], 1;\n\
         \tbarrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;\n\t@!%p0 bra END;\n\
         \tmbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1+2048], 256;\n{copy}\n{wait}\
         \tmul.wide.u32 %rd8, %r15, 256;\n\tadd.u64 %rd9, %rd1, %rd8;\n\tmov.u32 %r9, 0;\n\
         LOOP:\n\tadd.u32 %r10, %r1, %r9;\n\tld.shared.v4.u32 {{%r2, %r3, %r4, %r5}}, [%r10];\n\
         \tcvt.u64.u32 %rd10, %r9;\n\tadd.u64 %rd11, %rd9, %rd10;\n\tst.global.v4.u32 [%rd11], {{%r2, %r3, %r4, %r5}};\n\
         \tadd.u32 %r9, %r9, 16;\n\tsetp.lt.u32 %p2, %r9, 256;\n\t@%p2 bra LOOP;\nEND:"
    )
}

#[test]
fn bulk_copies_complete_on_their_barrier() {
    let input: Vec<u8> = (0..=255u8).collect();
    let copy = "\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], 256, [%r1+2048];";
    assert_eq!(bulk(copy, true, 1).unwrap(), input);
    let cta = "\tcp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.L2::cache_hint [%r1], [%rd0], 256, [%r1+2048], %rd3;";
    assert_eq!(bulk(cta, true, 1).unwrap(), input);
    // Without the arrival the phase stays open: the copied bytes are not yet readable.
    let raced = run(
        &bulk_body(copy, false).replace(
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1+2048], 256;",
            "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r1+2048], 256;",
        ),
        1,
    );
    assert!(matches!(raced, Err(SimError::AsyncRace { addr: 0, .. })), "{raced:?}");
    // Multicast: rank 0 copies into both CTAs; each waits on its own barrier.
    let multicast = "\tsetp.eq.u32 %p3, %r15, 0;\n\t@%p3 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r1], [%rd0], 256, [%r1+2048], 3;";
    assert_eq!(bulk(multicast, true, 2).unwrap(), [input.clone(), input].concat());
    let misaligned = "\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1+8], [%rd0], 256, [%r1+2048];";
    assert!(bulk(misaligned, true, 1).unwrap_err().to_string().contains("aligned to 16"));
    let remote = "\tmapa.shared::cluster.u32 %r11, %r1, 1;\n\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r11], [%rd0], 256, [%r1+2048];";
    assert!(bulk(remote, true, 2).unwrap_err().to_string().contains("not the destination CTA"));
}

/// A copy of nothing is refused (a bulk store or reduce-add of 0 bytes: a predicate that
/// should have held), and so is a zero-fill cp.async (src-size 0) naming memory past the end
/// of every allocation, while one naming allocated memory zero-fills as before.
#[test]
fn empty_bulk_copies_and_zero_fills_outside_memory_are_refused() {
    let store = |size: u32, reduce: bool| {
        let op = if reduce {
            "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16"
        } else {
            "cp.async.bulk.global.shared::cta.bulk_group"
        };
        run(
            &format!(
                "\tmov.u32 %r3, {size};\n\t{op} [%rd1], [%r1], %r3;\n\
                 \tcp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group 0;"
            ),
            1,
        )
    };
    for reduce in [false, true] {
        assert!(store(32, reduce).is_ok(), "reduce {reduce}");
        let e = store(0, reduce).unwrap_err();
        assert!(e.to_string().contains("positive multiple of 16"), "{e}");
    }
    // src-size 0 at the input's first bytes: zero fill; 1 MiB past the input's start:
    // outside memory.
    let fill = |offset: u32| {
        run(
            &format!(
                "\tmov.u32 %r3, 0;\n\tcp.async.cg.shared.global [%r1], [%rd0+{offset}], 16, %r3;\n\
                 \tcp.async.wait_all;\n\tld.shared.v4.u32 {{%r4, %r5, %r6, %r7}}, [%r1];\n\
                 \tst.global.v4.u32 [%rd1], {{%r4, %r5, %r6, %r7}};"
            ),
            1,
        )
    };
    assert_eq!(fill(0).unwrap()[..16], [0u8; 16]);
    let e = fill(1 << 20).unwrap_err();
    assert!(matches!(e, SimError::GlobalOutOfBounds { .. }), "{e}");
}
