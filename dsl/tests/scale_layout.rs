//! The 128x4 scale layout: the formula, bijectivity on padded shapes, round trips.

use moegen_dsl::formats::{FormatError, Scale128x4};

#[test]
fn offsets_follow_the_documented_formula() {
    let l = Scale128x4::new(256, 8).unwrap();
    assert_eq!((l.padded_rows(), l.padded_cols(), l.bytes()), (256, 8, 2048));
    assert_eq!(l.offset(0, 0), Some(0));
    assert_eq!(l.offset(0, 3), Some(3));
    assert_eq!(l.offset(1, 0), Some(16));
    assert_eq!(l.offset(32, 0), Some(4));
    assert_eq!(l.offset(127, 3), Some(31 * 16 + 3 * 4 + 3));
    assert_eq!(l.offset(0, 4), Some(512), "next scale column group is the next atom");
    assert_eq!(l.offset(128, 0), Some(1024), "next row block after all its column atoms");
    assert_eq!(l.offset(256, 0), None);
    assert_eq!(l.offset(0, 8), None);
}

#[test]
fn one_row_block_by_one_k_stage_is_2048_contiguous_bytes() {
    // 128 rows × 16 scale columns (K = 256) of row block 1 in a K = 1024 matrix.
    let l = Scale128x4::new(384, 64).unwrap();
    let mut offs: Vec<usize> = (128..256)
        .flat_map(|r| (16..32).map(move |c| (r, c)))
        .map(|(r, c)| l.offset(r, c).unwrap())
        .collect();
    offs.sort();
    let start = offs[0];
    assert_eq!(offs, (start..start + 2048).collect::<Vec<_>>());
}

#[test]
fn layout_is_a_bijection_on_padded_shapes() {
    for (rows, cols) in [(1, 1), (5, 3), (128, 4), (129, 5), (300, 17), (512, 32), (1000, 9)] {
        let l = Scale128x4::new(rows, cols).unwrap();
        let mut seen = vec![false; l.bytes()];
        for r in 0..l.padded_rows() {
            for c in 0..l.padded_cols() {
                let o = l.offset(r, c).unwrap();
                assert!(!seen[o], "{rows}x{cols}: offset {o} hit twice");
                seen[o] = true;
                assert_eq!(l.coords(o), Some((r, c)), "inverse at {o}");
            }
        }
        assert!(seen.iter().all(|&s| s), "{rows}x{cols}: not onto");
        assert_eq!(l.coords(l.bytes()), None);
    }
}

#[test]
fn swizzle_round_trips_and_zero_pads() {
    let (rows, cols) = (130, 6);
    let l = Scale128x4::new(rows, cols).unwrap();
    let linear: Vec<u8> = (0..rows * cols).map(|i| (i % 251) as u8 + 1).collect();
    let sw = l.swizzle(&linear).unwrap();
    assert_eq!(sw.len(), 256 * 8);
    assert_eq!(sw.iter().filter(|&&b| b != 0).count(), rows * cols, "padding is zero");
    assert_eq!(l.unswizzle(&sw).unwrap(), linear);
    assert_eq!(
        l.swizzle(&linear[1..]),
        Err(FormatError::LengthMismatch { expected: 780, actual: 779 })
    );
    assert!(l.unswizzle(&sw[1..]).is_err());
    assert_eq!(Scale128x4::new(0, 4), Err(FormatError::ZeroSize { rows: 0, cols: 4 }));
    assert!(matches!(Scale128x4::new(usize::MAX, 4), Err(FormatError::SizeOverflow { .. })));
}
