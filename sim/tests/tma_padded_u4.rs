//! The padded 4-bit TMA element type (CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B, PTX
//! `.b4x16_p64`): packed two per byte in global memory, 8 data bytes and 8 zero bytes per
//! 16 elements in shared memory, the barrier counting the packed bytes; the driver's
//! encoding rules; everything but loads and prefetches refused.

use moegen_sim::{
    Arg, Device, LaunchConfig, SimError, TensorMap, TensorMapError, TmaDataType, launch,
    parse_module,
};

const HEADER: &str =
    ".version 8.8\n.target sm_100a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n";

/// Box: 128 elements (64 packed bytes, 128 shared bytes) × 8 rows.
const ROWS: usize = 8;
const IMAGE: usize = 128 * ROWS;
const PACKED: usize = 64 * ROWS;

/// The global tensor: 256 elements (128 bytes) × 6 rows, stride 128 bytes.
const DIM0: u64 = 256;
const DIM1: u64 = 6;
const STRIDE: u64 = 128;

fn tensor() -> Vec<u8> {
    (0..(DIM1 * STRIDE) as u32).map(|i| (i.wrapping_mul(151) ^ (i >> 3)) as u8 | 0x11).collect()
}

fn map(address: u64, swizzle: u32) -> TensorMap {
    TensorMap {
        dtype: TmaDataType::U4Padded,
        address,
        dims: vec![DIM0, DIM1],
        strides: vec![STRIDE],
        box_dims: vec![128, ROWS as u32],
        swizzle,
    }
}

/// One thread: fills the destination (shared 1024..) with 0xAA, arms the barrier with
/// `expect` bytes, loads the box at (x, y), waits and copies the destination to `out`.
fn load(x: i32, y: i32, swizzle: u32, expect: usize) -> Result<Vec<u8>, SimError> {
    let body = format!(
        "
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<8>;
	mov.u32 %r1, smem;
	mov.u32 %r2, 0;
	mov.u32 %r3, 0xAAAAAAAA;
FILL:
	add.u32 %r4, %r1, %r2;
	st.shared.u32 [%r4+1024], %r3;
	add.u32 %r2, %r2, 4;
	setp.lt.u32 %p0, %r2, {IMAGE};
	@%p0 bra FILL;
	mbarrier.init.shared::cta.b64 [%r1], 1;
	mov.u64 %rd0, tmap;
	add.u32 %r5, %r1, 1024;
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], {expect};
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r5], [%rd0, {{{x}, {y}}}], [%r1];
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 0;
	@!%p1 bra WAIT;
	ld.param.u64 %rd1, [out];
	mov.u32 %r2, 0;
COPY:
	add.u32 %r4, %r1, %r2;
	ld.shared.u32 %r6, [%r4+1024];
	cvt.u64.u32 %rd2, %r2;
	add.u64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r6;
	add.u32 %r2, %r2, 4;
	setp.lt.u32 %p0, %r2, {IMAGE};
	@%p0 bra COPY;
	ret;"
    );
    let mut dev = Device::new();
    let address = dev.upload(&tensor());
    let out = run(&mut dev, &body, &map(address, swizzle))?;
    Ok(dev.download(out, IMAGE).unwrap_or_default())
}

/// Launches `body` (one thread) with the map and an output buffer of IMAGE bytes (returned).
fn run(dev: &mut Device, body: &str, map: &TensorMap) -> Result<u64, SimError> {
    let text = format!(
        "{HEADER}.visible .entry k(\n.param .align 64 .b8 tmap[128],\n.param .u64 out\n)\n{{\n{body}\n}}\n"
    );
    let m = parse_module(&text)?;
    let out = dev.alloc(IMAGE);
    let bytes = map.encode().map_err(|e| SimError::Launch(e.to_string()))?;
    let args = [Arg::Bytes(bytes.to_vec()), Arg::U64(out)];
    launch(dev, &m, "k", &LaunchConfig::new(1, 1, 4096), &args).map(|_| out)
}

/// The test's own statement of the shared image: row r, 16-element group g of the box is
/// global bytes 8g..8g+8 of the row (zero where the elements lie outside the tensor) at
/// logical offset 128r + 16g, then 8 zero bytes; 128B swizzle moves 16-byte chunk c of row
/// r to c ^ (r % 8) (the destination is 1024-byte aligned).
fn expected(x: i64, y: i64, swizzle: u32) -> Vec<u8> {
    let t = tensor();
    let mut img = vec![0u8; IMAGE];
    for r in 0..ROWS {
        let row = y + r as i64;
        for g in 0..8usize {
            let chunk = if swizzle == 128 { g ^ (r % 8) } else { g };
            for b in 0..8usize {
                let elem = x + 16 * g as i64 + 2 * b as i64;
                let inside = (0..DIM1 as i64).contains(&row) && (0..DIM0 as i64).contains(&elem);
                if inside {
                    let at = row as usize * STRIDE as usize + elem as usize / 2;
                    img[128 * r + 16 * chunk + b] = t[at];
                }
            }
        }
    }
    img
}

#[test]
fn a_load_pads_every_16_elements_and_swizzles_the_padded_rows() {
    for swizzle in [128, 0] {
        // Wholly inside in x, rows 6 and 7 outside; half outside in x; wholly outside.
        for (x, y) in [(0, 0), (128, 0), (192, 2), (-128, 1), (32, -3), (256, 0)] {
            let got = load(x, y, swizzle, PACKED).unwrap();
            assert_eq!(
                got,
                expected(x.into(), y.into(), swizzle),
                "swizzle {swizzle} at ({x}, {y})"
            );
        }
    }
    // The image holds the data at all (not a vacuous comparison of zeros).
    let img = expected(0, 0, 128);
    assert_eq!(img[..8], tensor()[..8]);
    assert!(img[8..16].iter().all(|&b| b == 0));
    assert_eq!(img[128 + 16..128 + 24], tensor()[128..136], "row 1, group 0 lands in chunk 1");
}

#[test]
fn the_barrier_counts_the_packed_bytes() {
    assert_eq!(load(0, 0, 128, PACKED).map(|_| ()), Ok(()));
    // Armed with the shared-memory (padded) size, the phase never completes: a hang.
    match load(0, 0, 128, IMAGE) {
        Err(SimError::Deadlock { detail, .. }) => assert!(detail.contains("WaitMbar"), "{detail}"),
        other => panic!("expected a deadlock, got {other:?}"),
    }
    assert_eq!(map(256, 128).box_bytes(), PACKED);
    assert_eq!(map(256, 128).shared_box_bytes(), IMAGE);
}

#[test]
fn the_encoding_follows_the_drivers_rules() {
    let ok = map(256, 128);
    let bytes = ok.encode().unwrap();
    assert_eq!(bytes[4], 14, "CUDA's CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B");
    assert_eq!(TensorMap::decode(&bytes), Some(ok.clone()));
    assert!(map(256, 0).encode().is_ok());
    assert_eq!(TmaDataType::U4Padded.cuda_name(), "16U4_ALIGN16B");
    assert_eq!(TmaDataType::U4Padded.bits(), 4);
    let rule = |m: TensorMap| match m.encode() {
        Err(TensorMapError::PaddedU4 { rule, value }) => (rule, value),
        other => panic!("expected a PaddedU4 error, got {other:?}"),
    };
    let with = |f: &dyn Fn(&mut TensorMap)| {
        let mut m = ok.clone();
        f(&mut m);
        m
    };
    let (r, v) = rule(with(&|m| m.box_dims[0] = 64));
    assert!(r.contains("box_dims[0]") && v == 64, "{r}");
    let (r, v) = rule(with(&|m| m.box_dims[0] = 256));
    assert!(r.contains("box_dims[0]") && v == 256, "{r}");
    let (r, v) = rule(with(&|m| m.dims[0] = 192));
    assert!(r.contains("dims[0]") && v == 192, "{r}");
    let (r, v) = rule(with(&|m| m.address = 256 + 16));
    assert!(r.contains("32-byte aligned") && v == 272, "{r}");
    let (r, v) = rule(with(&|m| m.strides[0] = 144));
    assert!(r.contains("stride") && v == 144, "{r}");
    for s in [32, 64] {
        let (r, v) = rule(with(&|m| m.swizzle = s));
        assert!(r.contains("swizzle") && v == u64::from(s), "{r}");
    }
    // The message names the type and the rule.
    let e = with(&|m| m.box_dims[0] = 64).encode().unwrap_err().to_string();
    assert!(e.contains("16U4_ALIGN16B") && e.contains("box_dims[0]"), "{e}");
    // A map patched past the rules after encoding does not decode.
    let mut patched = bytes;
    patched[88..92].copy_from_slice(&64u32.to_le_bytes());
    assert_eq!(TensorMap::decode(&patched), None);
    // The same parameters are fine as the packed type (its rules are the general ones).
    let packed = TensorMap { dtype: TmaDataType::U4Packed, ..with(&|m| m.box_dims[0] = 64) };
    assert!(packed.encode().is_ok());
}

#[test]
fn stores_are_refused_and_prefetches_accepted() {
    let mut dev = Device::new();
    let address = dev.upload(&tensor());
    let store = "
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	mov.u32 %r1, smem;
	mov.u64 %rd0, tmap;
	cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd0, {0, 0}], [%r1];
	ret;";
    match run(&mut dev, store, &map(address, 128)) {
        Err(SimError::BadInstruction { message, .. }) => {
            assert!(message.contains("16U4_ALIGN16B"), "{message}")
        }
        other => panic!("expected the store refused, got {other:?}"),
    }
    assert_eq!(dev.download(address, 16), Some(tensor()[..16].to_vec()), "nothing written");
    let prefetch = "
	.reg .b64 %rd<4>;
	mov.u64 %rd0, tmap;
	prefetch.tensormap [%rd0];
	cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd0, {128, 4}];
	ret;";
    assert!(run(&mut dev, prefetch, &map(address, 128)).is_ok());
}
