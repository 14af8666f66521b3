//! Which mbarrier an asynchronous copy or commit completes on, in a cluster of two CTAs
//! (a CTA pair): the one its operand names, translated as the hardware does for
//! `.cta_group::2` and multicast, never a substitute.

use moegen_sim::{
    Arg, Device, LaunchConfig, SimError, TensorMap, TmaDataType, launch, parse_module,
};

const HEADER: &str =
    ".version 8.8\n.target sm_100a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n";

/// Runs `cta0` in rank 0 and `cta1` in rank 1 of a 2-CTA cluster (one thread each). Both
/// start with barriers at offsets 0 and 8 (count 1) and a 128-byte box buffer at 128; `%r1`
/// is the CTA's own barrier 0, `%r2` the buffer, `%r4`/`%r5` barrier 0 of rank 0/1 (mapa),
/// `%rd0` the tensor map. After a cluster barrier each CTA copies its buffer to
/// `out[128·rank ..]`; the result is `out`.
fn pair(cta0: &str, cta1: &str) -> Result<Vec<u8>, SimError> {
    let body = format!(
        "
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<4>;
	mov.u32 %r0, %cluster_ctarank;
	mov.u32 %r1, smem;
	mbarrier.init.shared::cta.b64 [%r1], 1;
	mbarrier.init.shared::cta.b64 [%r1+8], 1;
	fence.mbarrier_init.release.cluster;
	barrier.cluster.arrive.release.aligned;
	barrier.cluster.wait.acquire.aligned;
	mov.u64 %rd0, tmap;
	cvta.param.u64 %rd0, %rd0;
	add.u32 %r2, %r1, 128;
	mapa.shared::cluster.u32 %r4, %r1, 0;
	mapa.shared::cluster.u32 %r5, %r1, 1;
	setp.eq.u32 %p0, %r0, 0;
	@!%p0 bra CTA1;
	{cta0}
	bra.uni SYNC;
CTA1:
	{cta1}
SYNC:
	barrier.cluster.arrive.release.aligned;
	barrier.cluster.wait.acquire.aligned;
	ld.param.u64 %rd1, [out];
	mul.wide.u32 %rd2, %r0, 128;
	add.u64 %rd1, %rd1, %rd2;
	mov.u32 %r6, 0;
COPY:
	add.u32 %r7, %r2, %r6;
	ld.shared.u32 %r8, [%r7];
	cvt.u64.u32 %rd2, %r6;
	add.u64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r8;
	add.u32 %r6, %r6, 4;
	setp.lt.u32 %p1, %r6, 128;
	@%p1 bra COPY;
	ret;"
    );
    let text = format!(
        "{HEADER}.visible .entry k(\n.param .align 64 .b8 tmap[128],\n.param .u64 out\n)\n.reqnctapercluster 2, 1, 1\n{{\n{body}\n}}\n"
    );
    let m = parse_module(&text)?;
    let mut dev = Device::new();
    let tensor = dev.upload(&box_bytes());
    let map = TensorMap {
        dtype: TmaDataType::U8,
        address: tensor,
        dims: vec![16, 8],
        strides: vec![16],
        box_dims: vec![16, 8],
        swizzle: 0,
    };
    let out = dev.alloc(256);
    let mut cfg = LaunchConfig::new(2, 1, 256);
    cfg.cluster = 2;
    let args = [
        Arg::Bytes(map.encode().map_err(|e| SimError::Launch(e.to_string()))?.to_vec()),
        Arg::U64(out),
    ];
    launch(&mut dev, &m, "k", &cfg, &args)?;
    Ok(dev.download(out, 256).unwrap_or_default())
}

fn box_bytes() -> Vec<u8> {
    (0..128u32).map(|i| (i * 7 + 3) as u8).collect()
}

const TMA: &str =
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes";

fn expect_tx(bar: &str, bytes: u32) -> String {
    format!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {bytes};")
}

fn wait(bar: &str, label: &str) -> String {
    format!(
        "{label}:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [{bar}], 0;\n\t@!%p2 bra {label};"
    )
}

fn tma(modifiers: &str, bar: &str, mask: &str) -> String {
    format!("{TMA}{modifiers} [%r2], [%rd0, {{0, 0}}], [{bar}]{mask};")
}

#[test]
fn cta_group_2_load_completes_on_the_barrier_it_names() {
    let data = box_bytes();
    // The odd CTA names its own barrier: its bytes complete there, not on the leader's.
    let own = format!(
        "{}\n\t{}\n\t{}",
        expect_tx("%r1", 128),
        tma(".cta_group::2", "%r1", ""),
        wait("%r1", "W")
    );
    let out = pair("", &own).unwrap();
    assert_eq!(out[128..], data[..]);
    assert!(out[..128].iter().all(|&b| b == 0));
    // moegen's form: the leader's barrier through mapa; the leader expects and waits.
    let leader = format!("{}\n\t{}", expect_tx("%r1", 128), wait("%r1", "W"));
    let out = pair(&leader, &tma(".cta_group::2", "%r4", "")).unwrap();
    assert_eq!(out[128..], data[..]);
    // Another barrier of the leader (offset 8): that one completes.
    let leader8 =
        format!("add.u32 %r9, %r1, 8;\n\t{}\n\t{}", expect_tx("%r9", 128), wait("%r9", "W"));
    let peer = format!(
        "add.u32 %r9, %r1, 8;\n\tmapa.shared::cluster.u32 %r10, %r9, 0;\n\t{}",
        tma(".cta_group::2", "%r10", "")
    );
    assert_eq!(pair(&leader8, &peer).unwrap()[128..], data[..]);
}

#[test]
fn without_cta_group_2_the_barrier_must_be_the_destinations() {
    for modifiers in ["", ".cta_group::1"] {
        let e = pair("", &tma(modifiers, "%r4", "")).unwrap_err();
        assert!(
            matches!(&e, SimError::BadInstruction { message, .. } if message.contains("neither the destination CTA 1")),
            "{e}"
        );
    }
}

#[test]
fn multicast_signals_each_destination_pair_at_the_named_rank_bit() {
    let data = box_bytes();
    // The leader multicasts to both CTAs naming its own barrier (rank bit 0 = 0): both
    // CTAs' bytes complete on the leader's barrier.
    let leader = format!(
        "{}\n\t{}\n\t{}",
        expect_tx("%r1", 256),
        tma(".multicast::cluster.cta_group::2", "%r1", ", 3"),
        wait("%r1", "W")
    );
    let out = pair(&leader, "").unwrap();
    assert_eq!(out[..128], data[..]);
    assert_eq!(out[128..], data[..]);
    // Naming the peer's barrier (rank bit 0 = 1): both complete on the peer's.
    let peer = format!("{}\n\t{}", expect_tx("%r1", 256), wait("%r1", "W"));
    let out = pair(&tma(".multicast::cluster.cta_group::2", "%r5", ", 3"), &peer).unwrap();
    assert_eq!(out[..128], data[..]);
    assert_eq!(out[128..], data[..]);
    // Without cta_group::2 each destination is signalled at its own barrier.
    let each = |label| format!("{}\n\t{}", expect_tx("%r1", 128), wait("%r1", label));
    let leader = format!("{}\n\t{}", tma(".multicast::cluster", "%r1", ", 3"), each("W0"));
    let out = pair(&leader, &each("W1")).unwrap();
    assert_eq!(out[..128], data[..]);
    assert_eq!(out[128..], data[..]);
    // A mask naming CTAs outside the cluster.
    let e = pair(&tma(".multicast::cluster.cta_group::2", "%r1", ", 5"), "").unwrap_err();
    assert!(e.to_string().contains("outside the cluster"), "{e}");
}

#[test]
fn commit_arrives_on_the_named_or_masked_barriers() {
    let commit = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster";
    // Multicast: barrier 0 of both CTAs.
    let leader = format!("{commit}.multicast::cluster.b64 [%r1], 3;\n\t{}", wait("%r1", "W0"));
    assert!(pair(&leader, &wait("%r1", "W1")).is_ok());
    // Unicast to the peer's barrier.
    assert!(pair(&format!("{commit}.b64 [%r5];"), &wait("%r1", "W1")).is_ok());
    // The leader's own barrier is not the one named: the peer would wait forever.
    let e = pair(&format!("{commit}.b64 [%r4];"), &wait("%r1", "W1")).unwrap_err();
    assert!(matches!(e, SimError::Deadlock { .. }), "{e}");
    let e = pair(&format!("{commit}.multicast::cluster.b64 [%r1], 7;"), "").unwrap_err();
    assert!(e.to_string().contains("outside the cluster"), "{e}");
}
