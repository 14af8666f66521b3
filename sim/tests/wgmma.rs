//! `wgmma.mma_async` against a reference written here: the operands are built on the host
//! as logical matrices, laid out in shared memory by the PTX ISA canonical K-major layouts
//! (every swizzle mode) and in the A register fragments of the PTX ISA figure; the results
//! are read back through the accumulator fragment layout and compared with the measured
//! H200 arithmetic (truncated terms and sum, `common::expected`; the values are chosen so
//! that f64 holds every term exactly). `wgmma_model.rs` checks that arithmetic step by step.
//! `wgmma_hazards.rs` has the asynchronous rules and descriptor mutations.

mod common;

use common::{Case, Rng, assert_same, expected, run_case};

#[test]
fn every_shape_from_registers_and_descriptors() {
    let mut r = Rng(0x1234_5678);
    for n in (8..=256).step_by(8) {
        for a_regs in [true, false] {
            let case = Case::new(n, a_regs, &mut r);
            let got = run_case(&case, "").unwrap();
            assert_same(&case, &got, &expected(&case), &format!("N {n} A from registers {a_regs}"));
        }
    }
}

#[test]
fn every_layout_scale_and_type() {
    let mut r = Rng(99);
    let layouts = common::LAYOUTS;
    for (i, layout) in layouts.into_iter().enumerate() {
        for bf16 in [true, false] {
            let mut case = Case::new([64, 24, 136, 256][i % 4], i % 2 == 0, &mut r);
            case.layout = layout;
            case.bf16 = bf16;
            case.fill(&mut r);
            case.neg_a = i % 3 == 0;
            case.neg_b = i % 4 == 1;
            for scale in ["0", "1", "%p1", "!%p1"] {
                case.scale_d = scale;
                case.scale_param = u32::from(i % 2 == 1);
                let got = run_case(&case, "").unwrap();
                let what = format!("{layout:?} bf16 {bf16} scale-d {scale}");
                assert_same(&case, &got, &expected(&case), &what);
            }
        }
    }
}

#[test]
fn special_values_follow_the_model() {
    let mut r = Rng(5);
    let mut case = Case::new(16, true, &mut r);
    // Inf · finite, Inf · 0, NaN, -Inf + Inf, subnormal products, an Inf accumulator.
    case.a[0][0] = 0x7F80; // +Inf in row 0
    case.a[1][3] = 0x7F80;
    case.b[5][3] = 0; // row 1 · column 5: Inf · 0
    case.a[2][7] = 0xFFC1; // NaN
    case.a[3][0] = 0x7F80;
    case.a[3][1] = 0xFF80; // +Inf and -Inf in one row
    case.a[4][2] = 0x0001; // 2^-133
    case.b[0][2] = 0x0001;
    case.c[6][6] = f32::NEG_INFINITY.to_bits();
    case.scale_d = "1";
    let got = run_case(&case, "").unwrap();
    assert_same(&case, &got, &expected(&case), "specials");
    let row_col = |row: usize, col: usize| common::d_value(&case, &got, row, col);
    assert_eq!(row_col(0, 1), f32::INFINITY.to_bits() | (u32::from(case.b[1][0] >> 15) << 31));
    assert_eq!(row_col(1, 5), 0x7FFF_FFFF);
    assert_eq!(row_col(2, 9), 0x7FFF_FFFF);
    assert_eq!(row_col(3, 2), 0x7FFF_FFFF);
}
