//! The simulator on small hand-written kernels: arithmetic, divergence, shared memory and
//! barriers, and the errors it must raise instead of corrupting anything.

use moegen_sim::{Arg, Device, LaunchConfig, SimError, launch, parse_module};

const HEADER: &str =
    ".version 8.8\n.target sm_90a\n.address_size 64\n.extern .shared .align 16 .b8 smem[];\n";

fn run(
    body: &str,
    params: &str,
    cfg: LaunchConfig,
    args: &[Arg],
    dev: &mut Device,
) -> Result<(), SimError> {
    let text = format!("{HEADER}.visible .entry k(\n{params}\n)\n{{\n{body}\n}}\n");
    let m = parse_module(&text)?;
    launch(dev, &m, "k", &cfg, args).map(|_| ())
}

fn words(dev: &Device, addr: u64, n: usize) -> Vec<u32> {
    dev.download(addr, 4 * n)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn divergent_branches_reconverge() {
    let body = "
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd0, [out];
	mov.u32 %r0, %tid.x;
	and.b32 %r1, %r0, 1;
	setp.eq.u32 %p0, %r1, 0;
	@%p0 bra EVEN;
	mul.lo.u32 %r2, %r0, 3;
	bra.uni JOIN;
EVEN:
	add.u32 %r2, %r0, 100;
JOIN:
	add.u32 %r2, %r2, 1;
	mul.wide.u32 %rd1, %r0, 4;
	add.u64 %rd2, %rd0, %rd1;
	st.global.u32 [%rd2], %r2;
	ret;";
    let mut dev = Device::new();
    let out = dev.alloc(64 * 4);
    run(body, ".param .u64 out", LaunchConfig::new(1, 64, 0), &[Arg::U64(out)], &mut dev).unwrap();
    let want: Vec<u32> = (0..64).map(|t| if t % 2 == 0 { t + 101 } else { 3 * t + 1 }).collect();
    assert_eq!(words(&dev, out, 64), want);
}

#[test]
fn shared_memory_and_barriers_order_a_block_wide_reversal() {
    let body = "
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd0, [buf];
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, %ntid.x;
	mov.u32 %r7, smem;
	mul.wide.u32 %rd1, %r0, 4;
	add.u64 %rd2, %rd0, %rd1;
	ld.global.u32 %r2, [%rd2];
	mad.lo.u32 %r3, %r0, 4, %r7;
	st.shared.u32 [%r3], %r2;
	bar.sync 0;
	sub.u32 %r4, %r1, 1;
	sub.u32 %r4, %r4, %r0;
	mad.lo.u32 %r5, %r4, 4, %r7;
	ld.shared.u32 %r6, [%r5];
	st.global.u32 [%rd2], %r6;
	ret;";
    let mut dev = Device::new();
    let data: Vec<u8> = (0u32..96).flat_map(|v| (v * 7).to_le_bytes()).collect();
    let buf = dev.upload(&data);
    run(body, ".param .u64 buf", LaunchConfig::new(1, 96, 96 * 4), &[Arg::U64(buf)], &mut dev)
        .unwrap();
    assert_eq!(words(&dev, buf, 96), (0u32..96).rev().map(|v| v * 7).collect::<Vec<_>>());
}

#[test]
fn f32_and_conversions_follow_ieee_and_the_cvt_forms() {
    let body = "
	.reg .f32 %f<6>;
	.reg .b32 %r<6>;
	.reg .b16 %h<2>;
	.reg .b8 %c<2>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd0, [out];
	mov.f32 %f0, 0f3F800000;
	mov.f32 %f1, 0f40400000;
	div.rn.f32 %f2, %f0, %f1;
	fma.rn.f32 %f3, %f2, %f1, 0fBF800000;
	cvt.rn.satfinite.e2m1x2.f32 %c0, %f1, 0f3F000000;
	cvt.u32.u16 %r1, %h0;
	cvt.rn.satfinite.e4m3x2.f32 %h1, 0f43E00000, 0f3F800000;
	cvt.u32.u16 %r2, %h1;
	mov.b32 %r3, %f2;
	mov.b32 %r4, %f3;
	mov.b32 %r5, {%c0, %c0, %c0, %c0};
	st.global.v4.b32 [%rd0], {%r3, %r4, %r2, %r5};
	ret;";
    let mut dev = Device::new();
    let out = dev.alloc(16);
    run(body, ".param .u64 out", LaunchConfig::new(1, 1, 0), &[Arg::U64(out)], &mut dev).unwrap();
    let w = words(&dev, out, 4);
    assert_eq!(f32::from_bits(w[0]), 1.0f32 / 3.0);
    assert_eq!(f32::from_bits(w[1]), (1.0f32 / 3.0).mul_add(3.0, -1.0));
    assert_eq!(w[2], 0x7E38, "448 → 0x7E high, 1.0 → 0x38 low");
    assert_eq!(w[3], 0x5151_5151, "3.0 → code 5 high nibble, 0.5 → code 1 low");
}

#[test]
fn out_of_bounds_and_unmodelled_instructions_are_errors() {
    let oob = "
	.reg .b64 %rd<2>;
	ld.param.u64 %rd0, [out];
	st.global.u32 [%rd0+4], 1;
	ret;";
    let mut dev = Device::new();
    let out = dev.alloc(4);
    let e = run(oob, ".param .u64 out", LaunchConfig::new(1, 1, 0), &[Arg::U64(out)], &mut dev)
        .unwrap_err();
    // Line 12 of the module: 4 header lines, the 4 entry lines, the body's leading blank line.
    assert!(matches!(e, SimError::GlobalOutOfBounds { line: 12, size: 4, .. }), "{e}");
    let shared = "
	.reg .b32 %r<2>;
	st.shared.u32 [%r0+64], 1;
	ret;";
    let e = run(shared, "", LaunchConfig::new(1, 1, 64), &[], &mut dev).unwrap_err();
    assert!(matches!(e, SimError::SharedOutOfBounds { limit: 64, .. }), "{e}");
    let unknown = "
	.reg .b32 %r<2>;
	popc.b32 %r0, %r1;
	ret;";
    let e = run(unknown, "", LaunchConfig::new(1, 32, 0), &[], &mut dev).unwrap_err();
    assert_eq!(e, SimError::Unsupported { line: 11, opcode: "popc.b32".into() });
    let spin = "
TOP:
	bra.uni TOP;";
    let mut cfg = LaunchConfig::new(1, 32, 0);
    cfg.step_limit = 10_000;
    assert!(matches!(run(spin, "", cfg, &[], &mut dev), Err(SimError::StepLimit { .. })));
    assert!(matches!(
        run("\tret;", ".param .u32 n", LaunchConfig::new(1, 1, 0), &[], &mut dev),
        Err(SimError::Launch(_))
    ));
    assert!(matches!(
        parse_module(".visible .entry k(\n)\n{\n\tadd.u32 %r0, 1, 2;\n}\n"),
        Err(SimError::Parse { .. })
    ));
}

#[test]
fn deadlocks_tmem_leaks_and_unpublished_async_reads_are_reported() {
    // A wait on an mbarrier phase that never completes: every thread sleeps.
    let deadlock = "
	.reg .pred %p<2>;
	.reg .b32 %r<2>;
	mov.u32 %r0, smem;
	mbarrier.init.shared::cta.b64 [%r0], 2;
	mbarrier.arrive.shared::cta.b64 _, [%r0];
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p0, [%r0], 0;
	@!%p0 bra WAIT;
	ret;";
    let mut dev = Device::new();
    let e = run(deadlock, "", LaunchConfig::new(1, 1, 64), &[], &mut dev).unwrap_err();
    assert!(matches!(&e, SimError::Deadlock { detail, .. } if detail.contains("WaitMbar")), "{e}");
    // TMEM still allocated when the CTA exits.
    let leak = "
	.reg .b32 %r<2>;
	mov.u32 %r0, smem;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], 32;
	ret;";
    let e = run(leak, "", LaunchConfig::new(1, 32, 64), &[], &mut dev).unwrap_err();
    assert!(matches!(e, SimError::TmemLeak { columns: 32, .. }), "{e}");
    // A warp touching TMEM lanes outside its quarter.
    let quarter = "
	.reg .b32 %r<4>;
	mov.u32 %r0, smem;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], 32;
	ld.shared.b32 %r1, [%r0];
	add.u32 %r2, %r1, 2097152;
	tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r3}, [%r2];
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r1, 32;
	ret;";
    let e = run(quarter, "", LaunchConfig::new(1, 32, 64), &[], &mut dev).unwrap_err();
    assert!(e.to_string().contains("may access TMEM lanes 0..32"), "{e}");
    // Reading bytes a cp.async wrote before the barrier phase it completes on has completed.
    let race = "
	.reg .b32 %r<4>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd0, [src];
	mov.u32 %r0, smem;
	mbarrier.init.shared::cta.b64 [%r0], 2;
	cp.async.cg.shared.global [%r0+16], [%rd0], 16;
	cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r0];
	ld.shared.u32 %r1, [%r0+16];
	ret;";
    let src = dev.upload(&[1u8; 16]);
    let e = run(race, ".param .u64 src", LaunchConfig::new(1, 1, 64), &[Arg::U64(src)], &mut dev)
        .unwrap_err();
    assert!(matches!(e, SimError::AsyncRace { addr: 16, .. }), "{e}");
}

#[test]
fn kind_f16_mma_accumulates_exactly() {
    // A = 128×16 of f16 1.0, B = 128×16 of f16 2.0 (uniform, so the swizzle does not matter):
    // one MMA gives 32 per element, an accumulating second one 64.
    let body = "
	.reg .pred %p<2>;
	.reg .b32 %r<24>;
	.reg .b64 %rd<8>;
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, smem;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 128;
	mov.u32 %r2, 0;
FILL:
	mad.lo.u32 %r3, %r2, 32, %r0;
	mad.lo.u32 %r4, %r3, 4, %r1;
	st.shared.u32 [%r4+1024], 1006648320;
	st.shared.u32 [%r4+17408], 1073758208;
	add.u32 %r2, %r2, 1;
	setp.lt.u32 %p0, %r2, 128;
	@%p0 bra FILL;
	bar.sync 0;
	ld.shared.b32 %r5, [%r1];
	setp.ne.u32 %p1, %r0, 0;
	@%p1 bra LOAD;
	add.u32 %r6, %r1, 1024;
	shr.u32 %r6, %r6, 4;
	and.b32 %r6, %r6, 16383;
	or.b32 %r6, %r6, 65536;
	add.u32 %r7, %r1, 17408;
	shr.u32 %r7, %r7, 4;
	and.b32 %r7, %r7, 16383;
	or.b32 %r7, %r7, 65536;
	mov.b64 %rd0, {%r6, 1073758272};
	mov.b64 %rd1, {%r7, 1073758272};
	tcgen05.mma.cta_group::1.kind::f16 [%r5], %rd0, %rd1, 136314896, 0;
	tcgen05.mma.cta_group::1.kind::f16 [%r5], %rd0, %rd1, 136314896, 1;
LOAD:
	bar.sync 0;
	tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r8}, [%r5+127];
	ld.param.u64 %rd2, [out];
	mul.wide.u32 %rd3, %r0, 4;
	add.u64 %rd4, %rd2, %rd3;
	st.global.u32 [%rd4], %r8;
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r5, 128;
	ret;";
    let mut dev = Device::new();
    let out = dev.alloc(32 * 4);
    run(
        body,
        ".param .u64 out",
        LaunchConfig::new(1, 32, 1024 + 32768),
        &[Arg::U64(out)],
        &mut dev,
    )
    .unwrap();
    assert!(
        words(&dev, out, 32).iter().all(|&w| f32::from_bits(w) == 64.0),
        "{:?}",
        words(&dev, out, 32)
    );
}

#[test]
fn malformed_ptx_is_an_error_not_a_panic() {
    let mut dev = Device::new();
    for bad in [
        ".visible .entry k(\n.param .u32 n[\n)\n{\n\tret;\n}\n",
        ".visible .entry k(\n)\n{\n\t.reg .b32 %r<;\n\tret;\n}\n",
        ".visible .entry k(\n)\n{\n\t.reg .b32 %r<2>;\n\tadd.u32 %r0;\n}\n",
        ".visible .entry k(\n)\n{\n\t.reg .b32 %r<2>;\n\tmbarrier.init.shared::cta.b64;\n}\n",
        ".visible .entry k(\n)\n{\n\t.reg .b32 %r<2>;\n\tcp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes;\n}\n",
        ".visible .entry k(\n)\n{\n\t.reg .b32 %r<2>;\n\ttcgen05.mma.cta_group::1.kind::f16 [%r0];\n}\n",
        ".visible .entry k(\n)\n{\n\t.reg .b32 %r<2>;\n\tst.shared.u32 [%r0];\n}\n",
    ] {
        let result = std::panic::catch_unwind(move || match parse_module(bad) {
            Err(_) => true,
            Ok(m) => {
                let mut dev = Device::new();
                launch(&mut dev, &m, "k", &LaunchConfig::new(1, 32, 64), &[]).is_err()
            }
        });
        assert_eq!(result.ok(), Some(true), "{bad}");
    }
    let _ = dev.alloc(1);
}
