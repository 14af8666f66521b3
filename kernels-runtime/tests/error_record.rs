//! The device error record's encoding: every word resets to !0 in one memset, the flag word
//! holds the flags inverted (a raised flag is a cleared bit, set by `red.and`), and the
//! decoder reads them back into the host checks' typed errors.

use moegen_dsl::abi::error_record::{
    FLAG_DUPLICATE_EXPERT, FLAG_EXPERT_OUT_OF_RANGE, FLAG_NON_FINITE_WEIGHT, FLAG_TILE_OVERFLOW,
    WORD_BAD_EXPERT_ID, WORD_DUPLICATE_EARLIER_SLOT, WORD_DUPLICATE_EXPERT_ID,
    WORD_FIRST_BAD_EXPERT, WORD_FIRST_DUPLICATE_EXPERT, WORD_FIRST_NON_FINITE_WEIGHT, WORD_FLAGS,
    WORDS,
};
use moegen_runtime::RuntimeError;
use moegen_runtime::error_record::{RESET, RESET_BYTE, RecordError, decode};

/// The record a kernel leaves after raising `flags` (cleared bits) on a reset record and
/// writing `words` (index, value).
fn raised(flags: u32, words: &[(usize, u32)]) -> [u32; WORDS] {
    let mut w = RESET;
    w[WORD_FLAGS] &= !flags;
    for &(i, v) in words {
        w[i] = v;
    }
    w
}

fn input_error(e: RuntimeError) -> Result<(), RecordError> {
    Err(RecordError::Input(e))
}

#[test]
fn the_reset_record_is_one_byte_everywhere_and_says_nothing() {
    assert!(RESET.iter().all(|&w| w == u32::from_le_bytes([RESET_BYTE; 4])));
    assert_eq!(decode(&RESET, 8, 256), Ok(()));
}

#[test]
fn cleared_flag_bits_decode_to_the_host_checks_errors() {
    let w = raised(
        FLAG_EXPERT_OUT_OF_RANGE,
        &[(WORD_FIRST_BAD_EXPERT, 8 * 3 + 5), (WORD_BAD_EXPERT_ID, 300)],
    );
    let want = RuntimeError::ExpertOutOfRange { token: 3, slot: 5, expert: 300, experts: 256 };
    assert_eq!(decode(&w, 8, 256), input_error(want));
    let w = raised(
        FLAG_DUPLICATE_EXPERT,
        &[
            (WORD_FIRST_DUPLICATE_EXPERT, 8 * 2 + 4),
            (WORD_DUPLICATE_EARLIER_SLOT, 1),
            (WORD_DUPLICATE_EXPERT_ID, 17),
        ],
    );
    let want = RuntimeError::DuplicateExpert { token: 2, slot: 4, earlier_slot: 1, expert: 17 };
    assert_eq!(decode(&w, 8, 256), input_error(want));
    let w = raised(FLAG_NON_FINITE_WEIGHT, &[(WORD_FIRST_NON_FINITE_WEIGHT, 9)]);
    let want = RuntimeError::NonFiniteRouterWeight { token: 1, slot: 1 };
    assert_eq!(decode(&w, 8, 256), input_error(want));
    assert_eq!(decode(&raised(FLAG_TILE_OVERFLOW, &[]), 8, 256), Err(RecordError::TileOverflow(2)));
}

/// A workspace's record before any forward has reset it: zeroed memory records nothing (as
/// with the encoding before the flags were inverted).
#[test]
fn a_zeroed_record_records_nothing() {
    assert_eq!(decode(&[0; WORDS], 8, 256), Ok(()));
    // A short record is no record.
    assert!(matches!(decode(&[0; 2], 8, 256), Err(RecordError::Undecodable(_))));
}

#[test]
fn records_the_kernels_cannot_leave_are_undecodable() {
    // A bit no kernel clears, or a flag without its first offender.
    for w in [
        raised(1 << 9, &[]),
        raised(FLAG_EXPERT_OUT_OF_RANGE, &[]),
        raised(FLAG_NON_FINITE_WEIGHT, &[]),
    ] {
        assert!(matches!(decode(&w, 8, 256), Err(RecordError::Undecodable(_))), "{w:08x?}");
    }
}
