//! Strictness: what the simulator does not model is refused. Each instruction-descriptor
//! bit and each shared-memory-descriptor field of a single `tcgen05.mma` / `tcgen05.cp` is
//! flipped in turn and must give the specific `SimError::Descriptor` (or, for the fields the
//! simulator models, run); unmodelled opcodes and modifiers are refused when the module is
//! parsed.

use moegen_sim::{Arg, Device, LaunchConfig, SimError, launch, parse_module};

const HEADER: &str =
    ".version 8.8\n.target sm_100a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n";

/// Shared layout of the MMA kernels: TMEM slot at 0, A (128 rows) at 1024, B (up to 256
/// rows) at 1024 + 16384, the SF source (four 512-byte atoms) at 1024 + 49152 (all zero: the values do not matter).
const SF_AT: u64 = 1024 + 49152;
const SMEM: usize = SF_AT as usize + 2048;

fn run(body: &str, params: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<(), SimError> {
    let text = format!("{HEADER}.visible .entry k(\n{params}\n)\n{{\n{body}\n}}\n");
    let m = parse_module(&text)?;
    let mut dev = Device::new();
    launch(&mut dev, &m, "k", &cfg, args).map(|_| ())
}

/// One `tcgen05.mma` of `kind` (block-scaled when `fp4`) with the given instruction and
/// A/B descriptors, preceded by a `tcgen05.cp` of the SF source descriptor (block-scaled).
fn mma(fp4: bool, idesc: u32, adesc: u64, bdesc: u64, sfdesc: u64) -> Result<(), SimError> {
    let mma = if fp4 {
        "tcgen05.cp.cta_group::1.32x128b.warpx4 [%r8], %rd2;\n\
         \ttcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 [%r2], %rd0, %rd1, %r3, [%r8], [%r9], 0;"
    } else {
        "tcgen05.mma.cta_group::1.kind::f16 [%r2], %rd0, %rd1, %r3, 0;"
    };
    let body = format!(
        "
	.reg .pred %p<2>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<4>;
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, smem;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 512;
	ld.shared.b32 %r2, [%r1];
	setp.ne.u32 %p0, %r0, 0;
	@%p0 bra DONE;
	ld.param.u32 %r3, [idesc];
	ld.param.u64 %rd0, [adesc];
	ld.param.u64 %rd1, [bdesc];
	ld.param.u64 %rd2, [sfdesc];
	add.u32 %r8, %r2, 256;
	add.u32 %r9, %r2, 260;
	{mma}
DONE:
	bar.sync 0;
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r2, 512;
	ret;"
    );
    let params = ".param .u32 idesc,\n.param .u64 adesc,\n.param .u64 bdesc,\n.param .u64 sfdesc";
    let args = [Arg::U32(idesc), Arg::U64(adesc), Arg::U64(bdesc), Arg::U64(sfdesc)];
    run(&body, params, LaunchConfig::new(1, 32, SMEM), &args)
}

/// moegen's descriptors: `((addr >> 4) & 0x3FFF) | 0x10000` with the high word.
fn desc(addr: u64, hi: u64) -> u64 {
    (hi << 32) | ((addr >> 4) & 0x3FFF) | 0x1_0000
}

const IDESC_FP4: u32 = 0x0820_0480; // M128 N128 E2M1 × E2M1, UE4M3
const IDESC_F16: u32 = 0x0820_0010; // M128 N128 F16 × F16 → F32
const AB_HI: u64 = 0x4000_4040;
const SF_HI: u64 = 0x0000_4008;

fn a() -> u64 {
    desc(1024, AB_HI)
}
fn b() -> u64 {
    desc(1024 + 16384, AB_HI)
}
fn sf() -> u64 {
    desc(SF_AT, SF_HI)
}

/// The field a descriptor error names, or "ok".
fn field(r: Result<(), SimError>, which: &str) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(SimError::Descriptor { descriptor, field, .. }) if descriptor == which => field.into(),
        Err(e) => format!("other error: {e}"),
    }
}

#[test]
fn moegen_descriptors_run() {
    assert_eq!(mma(true, IDESC_FP4, a(), b(), sf()), Ok(()));
    for idesc in [0x0840_0480, 0x0810_0480] {
        assert_eq!(mma(true, idesc, a(), b(), sf()), Ok(()), "{idesc:#x}");
    }
    assert_eq!(mma(false, IDESC_F16, a(), b(), sf()), Ok(()));
    // Every K step of a 128-byte stage: the start field + 2, 4, 6.
    for k in 1..4 {
        assert_eq!(mma(true, IDESC_FP4, a() + 2 * k, b() + 2 * k, sf() + 32 * k), Ok(()));
    }
}

#[test]
fn every_block_scaled_instruction_descriptor_bit_is_checked() {
    let expect = |bit: u32| match bit {
        0 | 1 => "reserved bits 0-1",
        2 => "sparsity (bit 2)",
        3 => "reserved bit 3",
        4 | 5 => "SFB id (bits 4-5)",
        6 => "reserved bit 6",
        7..=9 => "A type (bits 7-9)",
        10 | 11 => "B type (bits 10-11)",
        12 => "reserved bit 12",
        13 => "negate A (bit 13)",
        14 => "negate B (bit 14)",
        15 => "transpose A (bit 15)",
        16 => "transpose B (bit 16)",
        // N = 136, 144, 160, 192: valid shapes, modelled.
        17..=20 => "ok",
        // N = 0 or 384.
        21 | 22 => "N (bits 17-22)",
        23 => "scale type (bit 23)",
        24..=26 => "reserved bits 24-26",
        27 | 28 => "M (bits 27-28)",
        29 | 30 => "SFA id (bits 29-30)",
        _ => "K size (bit 31)",
    };
    for bit in 0..32 {
        let r = mma(true, IDESC_FP4 ^ (1 << bit), a(), b(), sf());
        assert_eq!(field(r, "instruction"), expect(bit), "bit {bit}");
    }
}

#[test]
fn every_f16_instruction_descriptor_bit_is_checked() {
    let expect = |bit: u32| match bit {
        0 | 1 => "sparsity selector (bits 0-1)",
        2 => "sparsity (bit 2)",
        3 => "saturate (bit 3)",
        4 | 5 => "D type (bits 4-5)",
        6 => "reserved bit 6",
        // A = BF16 with B = F16: B must match.
        7 => "B type (bits 10-12)",
        8 | 9 => "A type (bits 7-9)",
        10..=12 => "B type (bits 10-12)",
        13 => "negate A (bit 13)",
        14 => "negate B (bit 14)",
        15 => "transpose A (bit 15)",
        16 => "transpose B (bit 16)",
        17..=20 => "ok",
        21 | 22 => "N (bits 17-22)",
        23 => "reserved bit 23",
        24..=28 => "M (bits 24-28)",
        29 => "reserved bit 29",
        _ => "max shift (bits 30-31)",
    };
    for bit in 0..32 {
        let r = mma(false, IDESC_F16 ^ (1 << bit), a(), b(), sf());
        assert_eq!(field(r, "instruction"), expect(bit), "bit {bit}");
    }
}

/// The field of a shared-memory descriptor bit outside the start address and SBO.
fn smem_field(bit: u32) -> Option<&'static str> {
    Some(match bit {
        14 | 15 => "reserved bits 14-15",
        16..=29 => "LBO (bits 16-29)",
        30 | 31 => "reserved bits 30-31",
        46..=48 => "version (bits 46-48)",
        49..=51 => "base offset (bits 49-51)",
        52 => "LBO mode (bit 52)",
        53..=60 => "reserved bits 53-60",
        61..=63 => "swizzle (bits 61-63)",
        _ => return None,
    })
}

#[test]
fn every_unmodelled_shared_memory_descriptor_field_is_checked() {
    for bit in (0..64).filter(|&b| smem_field(b).is_some()) {
        let want = smem_field(bit).unwrap_or_default();
        let flip = 1u64 << bit;
        assert_eq!(field(mma(true, IDESC_FP4, a() ^ flip, b(), sf()), "A"), want, "A bit {bit}");
        assert_eq!(field(mma(true, IDESC_FP4, a(), b() ^ flip, sf()), "B"), want, "B bit {bit}");
        assert_eq!(field(mma(false, IDESC_F16, a() ^ flip, b(), sf()), "A"), want, "f16 bit {bit}");
        let r = mma(true, IDESC_FP4, a(), b(), sf() ^ flip);
        assert_eq!(field(r, "source"), want, "tcgen05.cp bit {bit}");
    }
    // Each swizzle mode the simulator does not model for the operand (none, 128B with 32B
    // atom, 64B, 32B) and for the scale-factor source (anything but none).
    for mode in [0u64, 1, 4, 6] {
        let m = (a() & !(7 << 61)) | (mode << 61);
        assert_eq!(field(mma(true, IDESC_FP4, m, b(), sf()), "A"), "swizzle (bits 61-63)");
    }
    for mode in [1u64, 2, 4, 6] {
        let m = sf() | (mode << 61);
        assert_eq!(field(mma(true, IDESC_FP4, a(), b(), m), "source"), "swizzle (bits 61-63)");
    }
}

#[test]
fn tmem_operands_must_start_at_lane_zero() {
    let body = "
	.reg .b32 %r<8>;
	.reg .b64 %rd<2>;
	mov.u32 %r1, smem;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 512;
	ld.shared.b32 %r2, [%r1];
	ld.param.u64 %rd0, [d];
	add.u32 %r3, %r2, 2097152;
	tcgen05.cp.cta_group::1.32x128b.warpx4 [%r3], %rd0;
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r2, 512;
	ret;";
    let e = run(body, ".param .u64 d", LaunchConfig::new(1, 32, SMEM), &[Arg::U64(sf())]);
    assert!(
        matches!(&e, Err(SimError::BadInstruction { message, .. }) if message.contains("lane 0")),
        "{e:?}"
    );
}

/// The first line of a one-instruction body.
const LINE: usize = 12;

fn refused(inst: &str) -> Result<(), SimError> {
    let body =
        format!("\t.reg .pred %p<2>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<4>;\n\t{inst}\n\tret;");
    let text = format!("{HEADER}.visible .entry k(\n.param .u64 p\n)\n{{\n{body}\n}}\n");
    parse_module(&text).map(|_| ())
}

#[test]
fn unmodelled_opcodes_and_modifiers_are_refused_when_parsed() {
    for inst in [
        // Contractible or non-IEEE f32 forms, flushing, saturation.
        "add.f32 %r0, %r1, %r2;",
        "mul.f32 %r0, %r1, %r2;",
        "add.rz.f32 %r0, %r1, %r2;",
        "fma.f32 %r0, %r1, %r2, %r3;",
        "div.approx.f32 %r0, %r1, %r2;",
        "min.ftz.f32 %r0, %r1, %r2;",
        "setp.lt.ftz.f32 %p0, %r1, %r2;",
        "add.sat.s32 %r0, %r1, %r2;",
        // Integer forms the PTX ISA does not define or the simulator does not model.
        "mul.u32 %r0, %r1, %r2;",
        "add.b32 %r0, %r1, %r2;",
        "mul.wide.u64 %rd0, %rd1, %rd2;",
        "cvt.rz.f32.f32 %r0, %r1;",
        // Memory: generic addressing, cache operators, ordering qualifiers.
        "ld.u32 %r0, [%rd0];",
        "ld.global.nc.u32 %r0, [%rd0];",
        "st.global.wb.u32 [%rd0], %r0;",
        "atom.global.relaxed.gpu.add.u32 %r0, [%rd0], 1;",
        "atom.global.cas.b32 %r0, [%rd0], 1, 2;",
        "mbarrier.arrive.b64 _, [%rd0];",
        "mbarrier.try_wait.shared::cta.b64 %p0, [%r0], %rd0;",
        "mbarrier.test_wait.parity.shared::cluster.b64 %p0, [%r0], 0;",
        "cp.async.mbarrier.arrive.shared::cta.b64 [%r0];",
        "cp.async.cg.shared.global.L2::512B [%r0], [%rd0], 16;",
        "ld.shared.L1::evict_last.u32 %r0, [%r1];",
        "ld.global.L2::evict_last.u32 %r0, [%rd0];",
        "prefetch.L2 [%rd0];",
        "prefetch.local.L1 [%rd0];",
        "createpolicy.range.L2::evict_last.b64 %rd0, [%rd1], 16, 32;",
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r0], [%r1], 16, [%r2];",
        "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.ignore_oob [%r0], [%rd0], 16, 0, 0, [%r2];",
        "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.cp_mask [%rd0], [%r0], 16, %rd1, %r1;",
        // Warpgroup instructions outside the modelled forms.
        "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%r0, %r1}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1;",
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1;",
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.e4m3.e4m3 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1;",
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, %r4, 0, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n12k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3, %r4, %r5}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.bf16.f32.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.fence.sync;",
        "wgmma.wait_group.sync 0;",
        "setmaxnreg.inc.sync.u32 64;",
        "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r0, %r1}, [%r2];",
        "ldmatrix.sync.aligned.m8n8.x4.b16 {%r0, %r1, %r2, %r3}, [%rd0];",
        "stmatrix.sync.aligned.m8n8.x3.shared.b16 [%r0], {%r1, %r2, %r3};",
        "lop3.or.b32 %r0|%p0, %r1, %r2, %r3, 0x3f, %p1;",
        "shf.l.b32 %r0, %r1, %r2, %r3;",
        "bfe.b32 %r0, %r1, 2, 3;",
        "prmt.b32.f8e %r0, %r1, %r2, %r3;",
        "add.rz.f32x2 %rd0, %rd1, %rd2;",
        "add.f32x2 %rd0, %rd1, %rd2;",
        "fma.rn.ftz.f32x2 %rd0, %rd1, %rd2, %rd3;",
        "ex2.approx.f16 %r0, %r1;",
        "ex2.f32 %r0, %r1;",
        "rcp.rz.f32 %r0, %r1;",
        "lg2.approx.f32 %r0, %r1;",
        "min.xorsign.abs.f32 %r0, %r1, %r2;",
        "max.ftz.f32 %r0, %r1, %r2;",
        "mov.b32 {%r0, %r1, %r2}, %r3;",
        "mul.bf16x2 %r0, %r1, %r2;",
        "add.rn.bf16x2 %r0, %r1, %r2;",
        "fma.rn.bf16x2 %r0, %r1, %r2, %r3;",
        "mul.rn.f16x2 %r0, %r1, %r2;",
        "max.relu.s16x2 %r0, %r1, %r2;",
        "add.u16x2 %r0, %r1, %r2;",
        // Cache hints and load modes of TMA.
        "cp.async.bulk.tensor.2d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%r0], [%rd0, {%r1, %r2}], [%r3];",
        "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%r0], [%rd0, {%r1, %r2}], [%r3], %r4;",
        // tcgen05 forms and kinds.
        "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16.collector::a::fill [%r0], %rd0, %rd1, %r1, [%r2], [%r3], 1;",
        "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block32 [%r0], %rd0, %rd1, %r1, [%r2], [%r3], 1;",
        "tcgen05.mma.cta_group::1.kind::tf32 [%r0], %rd0, %rd1, %r1, 1;",
        "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block16 [%r0], %rd0, %rd1, %r1, [%r2], [%r3], 1;",
        "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale [%r0], %rd0, %rd1, %r1, [%r2], [%r3], 1;",
        "tcgen05.mma.cta_group::1.kind::f8f6f4 [%r0], %rd0, %rd1, %r1, 1;",
        "tcgen05.mma.sp.cta_group::1.kind::f16 [%r0], %rd0, %rd1, [%r2], %r1, 1;",
        "tcgen05.ld.sync.aligned.16x256b.x1.b32 {%r0, %r1, %r2, %r3}, [%r4];",
        "tcgen05.ld.sync.aligned.32x32b.x1.pack::16b.b32 {%r0}, [%r4];",
        "tcgen05.cp.cta_group::1.128x256b [%r0], %rd0;",
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd0];",
        "tcgen05.shift.cta_group::1.down [%r0];",
        "fence.proxy.tensormap::generic.release.gpu;",
    ] {
        let opcode = inst.split_whitespace().next().unwrap_or_default().trim_end_matches(';');
        assert_eq!(
            refused(inst),
            Err(SimError::Unsupported { line: LINE, opcode: opcode.into() }),
            "{inst}"
        );
    }
    // Operand forms: wrong counts, a shfl without mask, a TMEM operand that is no address.
    for inst in [
        "tcgen05.mma.cta_group::1.kind::f16 [%r0], %rd0, %rd1, %r1, 1, 0;",
        "tcgen05.mma.cta_group::1.kind::f16 [%r0], [%r5], %rd1, %r1, 1;",
        "shfl.sync.idx.b32 %r0, %r1, 0, 31;",
        "ld.global.v4.u32 {%r0, %r1}, [%rd0];",
        "mbarrier.arrive.shared::cta.b64 %rd0, [%r0];",
        "bra NOWHERE;",
        "mov.u32 %r0, nosuchsymbol;",
        "lop3.b32 %r0, %r1, %r2, %r3, 256;",
        "lop3.b32 %r0, %r1, %r2, %r3, %r4;",
        "setmaxnreg.dec.sync.aligned.u32 20;",
        "setmaxnreg.dec.sync.aligned.u32 260;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1, 1, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1, 0, 1;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 2, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 2, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, {%r4, %r5, %r6, %r7}, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, %r3}, {%r3, %r5, %r6, %r7}, %rd1, 1, 1, 1, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r0, %r1, %r2, _}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r0, %r1, %r2, %r3}, %rd0, %rd1, 1, 1, 1, 0, 0;",
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r0, %r1, %r2}, %rd0, %rd1, 1, 1, 1;",
        "createpolicy.fractional.L2::evict_last.b64 %rd0, 0f3FC00000;",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%r0], [%rd0, {%r1, %r2}], [%r3];",
    ] {
        assert!(
            matches!(refused(inst), Err(SimError::BadInstruction { line: LINE, .. })),
            "{inst}"
        );
    }
    // Every tcgen05 instruction of a kernel uses one .cta_group.
    let mixed = refused(
        "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], 32;\n\ttcgen05.dealloc.cta_group::2.sync.aligned.b32 %r1, 32;",
    );
    assert!(
        matches!(&mixed, Err(SimError::BadInstruction { line, message, .. }) if *line == LINE + 1 && message.contains("mixes")),
        "{mixed:?}"
    );
}

/// Runs a body in one CTA of `threads` threads with `out` (256 bytes) as parameter.
fn run_simple(body: &str, threads: u32) -> Result<Vec<u8>, SimError> {
    let text = format!("{HEADER}.visible .entry k(\n.param .u64 out\n)\n{{\n{body}\n}}\n");
    let m = parse_module(&text)?;
    let mut dev = Device::new();
    let out = dev.upload(&(0..=255).collect::<Vec<u8>>());
    launch(&mut dev, &m, "k", &LaunchConfig::new(1, threads, 256), &[Arg::U64(out)])?;
    Ok(dev.download(out, 256).unwrap_or_default())
}

fn message(r: Result<Vec<u8>, SimError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

const REGS: &str = "\t.reg .pred %p<4>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<4>;\n\tmov.u32 %r0, %tid.x;\n\tld.param.u64 %rd0, [out];\n\tmov.u32 %r1, smem;\n";

#[test]
fn runtime_rules_are_enforced() {
    // bra.uni whose lanes disagree.
    let body = format!("{REGS}\tsetp.lt.u32 %p0, %r0, 5;\n\t@%p0 bra.uni END;\nEND:\n\tret;");
    assert!(message(run_simple(&body, 32)).contains("bra.uni diverges"));
    assert_eq!(message(run_simple(&body, 4)), "ok", "uniform when every lane agrees");
    // Misaligned global and shared accesses.
    let body = format!("{REGS}\tld.global.u32 %r2, [%rd0+2];\n\tret;");
    assert!(message(run_simple(&body, 1)).contains("not aligned to 4 bytes"));
    let body = format!("{REGS}\tst.shared.v2.b32 [%r1+4], {{%r0, %r0}};\n\tret;");
    assert!(message(run_simple(&body, 1)).contains("not aligned to 8 bytes"));
    // More arrivals than the phase expects.
    let body = format!(
        "{REGS}\tmbarrier.init.shared::cta.b64 [%r1], 1;\n\tmbarrier.arrive.shared::cta.b64 _, [%r1], 2;\n\tret;"
    );
    assert!(message(run_simple(&body, 1)).contains("more arrivals"));
    // A member mask naming a lane that exited.
    let body =
        format!("{REGS}\tsetp.eq.u32 %p0, %r0, 3;\n\t@%p0 ret;\n\tbar.warp.sync -1;\n\tret;");
    assert!(message(run_simple(&body, 32)).contains("not running"));
    // bar.warp.sync waits for a lane that arrives later on another path.
    let body = format!(
        "{REGS}\tsetp.eq.u32 %p0, %r0, 3;\n\t@%p0 bra LATE;\n\tbar.warp.sync -1;\n\tbra.uni END;\nLATE:\n\tbar.warp.sync -1;\nEND:\n\tret;"
    );
    assert_eq!(message(run_simple(&body, 32)), "ok");
    // cp.async completed by wait_group becomes readable; without the wait it is a race.
    let copy = "\tcp.async.ca.shared.global [%r1+16], [%rd0+4], 4;\n\tcp.async.commit_group;\n";
    let read = "\tld.shared.u32 %r2, [%r1+16];\n\tst.global.u32 [%rd0], %r2;\n\tret;";
    let waited = run_simple(&format!("{REGS}{copy}\tcp.async.wait_group 0;\n{read}"), 1).unwrap();
    assert_eq!(waited[..4], [4, 5, 6, 7]);
    let raced = run_simple(&format!("{REGS}{copy}{read}"), 1);
    assert!(matches!(raced, Err(SimError::AsyncRace { addr: 16, .. })), "{raced:?}");
    // elect.sync with a mask that is not the lanes present.
    let body = format!("{REGS}\telect.sync %r2|%p1, 0xffff;\n\tret;");
    assert!(message(run_simple(&body, 32)).contains("member mask"));
    let body = format!("{REGS}\telect.sync %r2|%p1, -1;\n\tst.global.u32 [%rd0], %r2;\n\tret;");
    assert_eq!(run_simple(&body, 32).unwrap()[..4], [0, 0, 0, 0], "laneid of the leader");
}
