//! Malformed input never panics: thousands of mutants of small kernels (tcgen05, TMA and
//! clusters, SIMT, the Hopper warpgroup instructions) — characters deleted, tokens
//! replaced, lines duplicated or swapped — are parsed and, when they parse, launched; each
//! must end in `Ok` or a typed `SimError`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use moegen_sim::{Arg, Device, LaunchConfig, TensorMap, TmaDataType, launch, parse_module};

const SEEDS: [&str; 4] = [
    // tcgen05: alloc, cp, mma, commit, ld, dealloc.
    ".version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(
.param .u32 idesc,
.param .u64 adesc,
.param .u64 sfdesc,
.param .u64 out
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<4>;
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, smem;
	mbarrier.init.shared::cta.b64 [%r1+8], 1;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 512;
	ld.shared.b32 %r2, [%r1];
	elect.sync _|%p0, 0xffffffff;
	@!%p0 bra DONE;
	ld.param.u32 %r3, [idesc];
	ld.param.u64 %rd0, [adesc];
	ld.param.u64 %rd3, [sfdesc];
	add.u32 %r8, %r2, 256;
	add.u32 %r9, %r2, 260;
	tcgen05.cp.cta_group::1.32x128b.warpx4 [%r8], %rd3;
	tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 [%r2], %rd0, %rd0, %r3, [%r8], [%r9], 0;
	tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r1+8];
DONE:
	mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1+8], 0;
	@!%p1 bra DONE;
	tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r10, %r11}, [%r2];
	tcgen05.wait::ld.sync.aligned;
	ld.param.u64 %rd1, [out];
	mul.wide.u32 %rd2, %r0, 8;
	add.u64 %rd1, %rd1, %rd2;
	st.global.v2.b32 [%rd1], {%r10, %r11};
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r2, 512;
	ret;
}
",
    // TMA in a cluster of two, mapa, remote arrive, cluster barrier, bulk store.
    ".version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(
.param .align 64 .b8 tmap[128],
.param .u64 out
)
.reqnctapercluster 2, 1, 1
{
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<4>;
	mov.u32 %r0, %cluster_ctarank;
	mov.u32 %r1, smem;
	mbarrier.init.shared::cta.b64 [%r1], 2;
	fence.mbarrier_init.release.cluster;
	barrier.cluster.arrive.release.aligned;
	barrier.cluster.wait.acquire.aligned;
	mov.u64 %rd0, tmap;
	cvta.param.u64 %rd0, %rd0;
	add.u32 %r2, %r1, 128;
	mapa.shared::cluster.u32 %r4, %r1, 0;
	setp.eq.u32 %p0, %r0, 0;
	mov.u32 %r3, %tid.x;
	setp.ne.u32 %p3, %r3, 0;
	@%p3 bra W;
	@%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 256;
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%r2], [%rd0, {0, 0}], [%r4];
	@!%p0 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];
W:
	@%p0 mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], 0;
	barrier.cluster.arrive.release.aligned;
	barrier.cluster.wait.acquire.aligned;
	ld.param.u64 %rd1, [out];
	fence.proxy.async.shared::cta;
	cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r2], 128;
	cp.async.bulk.commit_group;
	cp.async.bulk.wait_group 0;
	ret;
}
",
    // SIMT: shuffles, votes, reductions, cp.async, atomics, conversions, named barriers.
    ".version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 16 .b8 smem[];
.visible .entry k(
.param .u64 out,
.param .u32 n
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<4>;
	mov.u32 %r0, %tid.x;
	ld.param.u32 %r1, [n];
	ld.param.u64 %rd0, [out];
	shfl.sync.bfly.b32 %r2, %r0, 1, 0x1f, -1;
	vote.sync.ballot.b32 %r3, %p0, -1;
	redux.sync.add.u32 %r4, %r0, -1;
	mov.u32 %r5, smem;
	cp.async.cg.shared.global [%r5], [%rd0], 16, 16;
	cp.async.commit_group;
	cp.async.wait_group 0;
	atom.shared.add.u32 %r6, [%r5], 1;
	cvt.rni.f32.f32 %f0, %f1;
	div.rn.f32 %f0, %f1, %f2;
	cvt.rn.bf16x2.f32 %r7, %f0, %f1;
	bar.sync 0;
	setp.lt.u32 %p1, %r0, %r1;
	@%p1 red.global.add.u32 [%rd0], 1;
	bar.warp.sync -1;
	ret;
}
",
    // Hopper: setmaxnreg, ldmatrix, bit manipulation, approximate and packed f32, wgmma
    // from registers with a 128B-swizzled B, stmatrix.
    ".version 8.8
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(
.param .u64 out
)
.reqntid 128, 1, 1
{
	.reg .pred %p<4>;
	.reg .b32 %r<32>;
	.reg .b64 %rd<8>;
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, smem;
	setmaxnreg.inc.sync.aligned.u32 232;
	and.b32 %r2, %r0, 31;
	shl.b32 %r3, %r2, 4;
	add.u32 %r4, %r1, %r3;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r8, %r9, %r10, %r11}, [%r4];
	prmt.b32 %r12, %r8, %r9, 0x5410;
	lop3.b32 %r13, %r12, %r10, %r11, 0x96;
	shf.l.wrap.b32 %r14, %r13, %r12, 7;
	bfe.s32 %r15, %r14, 3, 9;
	ex2.approx.ftz.f32 %r16, %r15;
	rcp.approx.ftz.f32 %r17, %r16;
	mov.b64 %rd1, {%r16, %r17};
	fma.rn.f32x2 %rd2, %rd1, %rd1, %rd1;
	mov.b64 {%r18, %r19}, %rd2;
	shr.u32 %r5, %r1, 4;
	cvt.u64.u32 %rd3, %r5;
	or.b64 %rd3, %rd3, 0x4000004000010000;
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r20, %r21, %r22, %r23}, {%r8, %r9, %r10, %r11}, %rd3, 0, 1, 1, 0;
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%r4+2048], {%r20, %r21};
	ld.param.u64 %rd4, [out];
	mul.wide.u32 %rd5, %r0, 8;
	add.u64 %rd4, %rd4, %rd5;
	st.global.v2.b32 [%rd4], {%r22, %r23};
	ret;
}
",
];

const TOKENS: [&str; 27] = [
    "{%r8, %r9, %r10, %r11}",
    ".f32x2",
    "0x4000004000010000",
    "%r1",
    "%rd0",
    "%p0",
    "!%p1",
    "0",
    "-1",
    "1",
    "7",
    "0xFFFFFFFF",
    "4294967296",
    "[%r1]",
    "[%r1+1]",
    "{%r1, %r2}",
    "_",
    ".b64",
    ".u8",
    "128",
    "65536",
    "smem",
    "[%rd0, {0, 0}]",
    "0x40004040",
    "1024",
    "DONE",
    ";",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(text: &str, r: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for _ in 0..1 + r.below(3) {
        let i = r.below(lines.len());
        match r.below(5) {
            0 => {
                let l = &mut lines[i];
                if !l.is_empty() {
                    let mut at = r.below(l.len());
                    while !l.is_char_boundary(at) {
                        at -= 1;
                    }
                    l.remove(at);
                }
            }
            1 => {
                let words: Vec<&str> = lines[i].split([' ', ',']).collect();
                let w = r.below(words.len());
                let mut out: Vec<String> = words.iter().map(|s| (*s).to_owned()).collect();
                out[w] = TOKENS[r.below(TOKENS.len())].to_owned();
                lines[i] = out.join(" ");
            }
            2 => {
                let l = lines[i].clone();
                lines.insert(r.below(lines.len()), l);
            }
            3 => {
                let j = r.below(lines.len());
                lines.swap(i, j);
            }
            _ => {
                // A different number somewhere in the line.
                let l = &mut lines[i];
                if let Some(p) = l.find(|c: char| c.is_ascii_digit()) {
                    let n = ["0", "3", "255", "4096", "99999999999"][r.below(5)];
                    l.replace_range(p..p + 1, n);
                }
            }
        }
    }
    lines.join("\n")
}

/// Arguments for `params`: valid ones, or, unless `valid`, sometimes random descriptors.
fn args(dev: &mut Device, params: &[(usize, String)], r: &mut Rng, valid: bool) -> Vec<Arg> {
    let random = |r: &mut Rng| !valid && r.below(4) == 0;
    let tensor = dev.alloc(4096);
    let map = TensorMap {
        dtype: TmaDataType::U8,
        address: tensor,
        dims: vec![16, 8],
        strides: vec![16],
        box_dims: vec![16, 8],
        swizzle: 0,
    };
    params
        .iter()
        .map(|(size, name)| match size {
            4 if name == "idesc" => Arg::U32(if random(r) { r.next() as u32 } else { 0x0820_0480 }),
            4 => Arg::U32(r.below(100) as u32),
            8 if name == "adesc" => {
                Arg::U64(if random(r) { r.next() } else { 0x4000_4040_0001_0040 })
            }
            8 if name == "sfdesc" => {
                Arg::U64(if random(r) { r.next() } else { 0x0000_4008_0001_0040 })
            }
            8 => Arg::U64(dev.alloc(4096)),
            128 => Arg::Bytes(map.encode().map(|b| b.to_vec()).unwrap_or_default()),
            n => Arg::Bytes(vec![0; *n]),
        })
        .collect()
}

#[test]
fn mutants_of_small_kernels_never_panic() {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut launched, mut succeeded) = (0, 0);
    for i in 0..8000 {
        let seed = SEEDS[i % SEEDS.len()];
        let text = if i < SEEDS.len() { seed.to_owned() } else { mutate(seed, &mut r) };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let Ok(m) = parse_module(&text) else { return (0, 0) };
            let (mut ran, mut ok) = (0, 0);
            for k in &m.kernels {
                let params: Vec<(usize, String)> =
                    k.params.iter().map(|p| (p.size, p.name.clone())).collect();
                let mut dev = Device::new();
                let args = args(&mut dev, &params, &mut r, i < SEEDS.len());
                let cluster = k.reqnctapercluster.unwrap_or(1);
                let block = match k.reqntid {
                    Some(n) => n.clamp(1, 1024),
                    None if i < SEEDS.len() => 32,
                    None => [32, 64][r.below(2)],
                };
                let mut cfg = LaunchConfig::new(2 * cluster, block, 64 * 1024);
                cfg.cluster = cluster;
                cfg.step_limit = 200_000;
                cfg.profile = r.below(2) == 0;
                let result = launch(&mut dev, &m, &k.name, &cfg, &args);
                assert!(i >= SEEDS.len() || result.is_ok(), "seed {i}: {result:?}");
                ran += 1;
                ok += usize::from(result.is_ok());
            }
            (ran, ok)
        }));
        match outcome {
            Ok((ran, ok)) => {
                launched += ran;
                succeeded += ok;
            }
            Err(_) => panic!("mutant {i} panicked:\n{text}"),
        }
    }
    // Enough mutants got past the parser, and past the first instructions, to matter.
    assert!(launched > 1000 && succeeded > 500, "{launched} launched, {succeeded} ran");
}
