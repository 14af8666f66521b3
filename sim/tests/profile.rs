//! The per-warp profile: warp-instruction issues by category on a kernel whose counts are
//! known by hand (a uniform loop, a divergent branch, a reconvergence, a barrier).

use moegen_sim::{Category, Device, LaunchConfig, launch, parse_module};

const KERNEL: &str = ".version 8.8
.target sm_100a
.address_size 64
.visible .entry k(
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .f32 %f<2>;
	.reg .b64 %rd<2>;
	mov.u32 %r0, %tid.x;
	shr.u32 %r1, %r0, 5;
	setp.eq.u32 %p0, %r1, 0;
	@%p0 bra W0;
	add.rn.f32 %f0, %f1, %f1;
	bra.uni END;
W0:
	mov.u32 %r3, 0;
LOOP:
	add.u32 %r3, %r3, 1;
	setp.lt.u32 %p1, %r3, 4;
	@%p1 bra LOOP;
	and.b32 %r4, %r0, 1;
	setp.eq.u32 %p1, %r4, 0;
	@%p1 bra EVEN;
	mul.lo.u32 %r5, %r0, 3;
	bra.uni END;
EVEN:
	cvt.u64.u32 %rd0, %r0;
END:
	bar.sync 0;
	ret;
}
";

#[test]
fn profile_counts_warp_instructions_by_category() {
    let m = parse_module(KERNEL).unwrap();
    let mut dev = Device::new();
    let mut cfg = LaunchConfig::new(3, 64, 0);
    assert_eq!(launch(&mut dev, &m, "k", &cfg, &[]).unwrap().profile, None, "off by default");
    cfg.profile = true;
    let stats = launch(&mut dev, &m, "k", &cfg, &[]).unwrap();
    let p = stats.profile.unwrap();
    assert_eq!(p.ctas(), 3);
    assert_eq!(p.warps().len(), 2);
    // Warp 0: the loop runs 4 times converged; the parity branch splits the warp into an odd
    // group (mul, bra) and an even group (cvt), which meet again at the barrier.
    let w0 = &p.warps()[0];
    let want0 = [
        (Category::Move, 2),
        (Category::AluInt, 13),
        (Category::Branch, 7),
        (Category::Convert, 1),
        (Category::BarrierCta, 1),
        (Category::Exit, 1),
    ];
    // Warp 1 falls through to the f32 add and jumps to the barrier.
    let w1 = &p.warps()[1];
    let want1 = [
        (Category::Move, 1),
        (Category::AluInt, 2),
        (Category::Branch, 2),
        (Category::AluF32, 1),
        (Category::BarrierCta, 1),
        (Category::Exit, 1),
    ];
    for (w, want) in [(w0, &want0[..]), (w1, &want1[..])] {
        let got: Vec<(Category, u64)> = w.nonzero().collect();
        let mut want: Vec<(Category, u64)> = want.iter().map(|&(c, n)| (c, 3 * n)).collect();
        want.sort();
        assert_eq!(got, want);
    }
    assert_eq!(w0.total(), 3 * 25);
    assert_eq!(w1.total(), 3 * 8);
    assert_eq!(p.sum([0, 1]).count(Category::BarrierCta), 6);
    // Thread-instructions count lanes: warp 0 issues 22 times with 32 lanes, twice with the
    // 16 odd lanes and once with the 16 even ones; warp 1 8 times with 32.
    assert_eq!(stats.thread_instructions, 3 * (22 * 32 + 2 * 16 + 16 + 8 * 32));
}

#[test]
fn hopper_and_fast_path_instructions_have_their_categories() {
    let text = ".version 8.8
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(
)
{
	.reg .b32 %r<16>;
	.reg .b64 %rd<4>;
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, smem;
	and.b32 %r2, %r0, 31;
	shl.b32 %r2, %r2, 4;
	add.u32 %r2, %r2, %r1;
	prmt.b32 %r3, %r0, %r0, 0x3210;
	lop3.b32 %r3, %r3, %r0, %r0, 0xE8;
	ex2.approx.ftz.f32 %r4, %r3;
	rcp.approx.ftz.f32 %r4, %r4;
	mov.b64 %rd0, {%r4, %r4};
	fma.rn.f32x2 %rd0, %rd0, %rd0, %rd0;
	ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r5, %r6}, [%r2];
	stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r2+1024], {%r5, %r6};
	createpolicy.fractional.L2::evict_last.b64 %rd1, 1.0;
	setmaxnreg.dec.sync.aligned.u32 40;
	wgmma.fence.sync.aligned;
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	ret;
}
";
    let m = parse_module(text).unwrap();
    let mut cfg = LaunchConfig::new(1, 128, 4096);
    cfg.profile = true;
    let p = launch(&mut Device::new(), &m, "k", &cfg, &[]).unwrap().profile.unwrap();
    let w = p.sum(0..4);
    for (c, n) in [
        (Category::Move, 3),
        (Category::AluInt, 5),
        (Category::Mufu, 2),
        (Category::AluF32x2, 1),
        (Category::LoadMatrix, 1),
        (Category::StoreMatrix, 1),
        (Category::Prefetch, 1),
        (Category::SetMaxNReg, 1),
        (Category::WgmmaSync, 3),
        (Category::Exit, 1),
    ] {
        assert_eq!(w.count(c), 4 * n, "{}", c.name());
    }
    assert_eq!(w.total(), 4 * 19);
}
