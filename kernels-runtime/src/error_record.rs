//! Decoding the device-side error record (`moegen_dsl::abi::error_record`) into the typed
//! errors the host-side checks raise for the same input.

use moegen_dsl::abi::error_record::{
    ALL_FLAGS, FLAG_DUPLICATE_EXPERT, FLAG_EXPERT_OUT_OF_RANGE, FLAG_NON_FINITE_WEIGHT,
    FLAG_TILE_OVERFLOW, WORD_BAD_EXPERT_ID, WORD_DUPLICATE_EARLIER_SLOT, WORD_DUPLICATE_EXPERT_ID,
    WORD_FIRST_BAD_EXPERT, WORD_FIRST_DUPLICATE_EXPERT, WORD_FIRST_NON_FINITE_WEIGHT, WORD_FLAGS,
    WORDS,
};

use crate::error::RuntimeError;

/// What an error record says, when it says anything.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// Invalid input, named as the host check would name it.
    #[error(transparent)]
    Input(#[from] RuntimeError),
    /// The routing needed more tiles than the workspace's tile arrays hold: the workspace was
    /// planned for fewer tokens or local experts than were run.
    #[error("the routing needed more tiles than the workspace plans for (error record {0:#x})")]
    TileOverflow(u32),
    /// Flags this version does not know, or a record whose route words contradict its flags.
    #[error("undecodable device error record {0:08x?}")]
    Undecodable([u32; WORDS]),
}

/// The value the runtime resets the record to before a forward: every word !0 (the flag
/// word holds the flags inverted), one memset of 0xFF bytes.
pub const RESET: [u32; WORDS] = [u32::MAX; WORDS];

/// The byte every byte of the record is reset to.
pub const RESET_BYTE: u8 = 0xFF;

/// Decodes `words` (the record as downloaded) for a routing of `top_k` slots per token over
/// `experts` experts. An out-of-range expert id wins over a duplicate one, and that over a
/// non-finite weight (the host checks in the same order).
pub fn decode(words: &[u32], top_k: usize, experts: usize) -> Result<(), RecordError> {
    let mut w = [0u32; WORDS];
    for (dst, src) in w.iter_mut().zip(words) {
        *dst = *src;
    }
    // Zeroed memory no forward has reset yet (a new workspace) records nothing: a kernel
    // only clears flag bits of a reset word, so a forward never leaves word 0 at 0.
    if words.len() >= WORDS && words.iter().all(|&x| x == 0) {
        return Ok(());
    }
    let flags = !w[WORD_FLAGS];
    if flags == 0 {
        return Ok(());
    }
    let undecodable = RecordError::Undecodable(w);
    if flags & !ALL_FLAGS != 0 || words.len() < WORDS || top_k == 0 {
        return Err(undecodable);
    }
    let at = |route: u32| (route as usize / top_k, route as usize % top_k);
    if flags & FLAG_EXPERT_OUT_OF_RANGE != 0 {
        let route = w[WORD_FIRST_BAD_EXPERT];
        if route == u32::MAX {
            return Err(undecodable);
        }
        let (token, slot) = at(route);
        let expert = i64::from(w[WORD_BAD_EXPERT_ID] as i32);
        return Err(RuntimeError::ExpertOutOfRange { token, slot, expert, experts }.into());
    }
    if flags & FLAG_DUPLICATE_EXPERT != 0 {
        let route = w[WORD_FIRST_DUPLICATE_EXPERT];
        let (token, slot) = at(route);
        let earlier_slot = w[WORD_DUPLICATE_EARLIER_SLOT] as usize;
        // The earlier slot is one of the same token's, before this one.
        if route == u32::MAX || earlier_slot >= slot {
            return Err(undecodable);
        }
        let expert = i64::from(w[WORD_DUPLICATE_EXPERT_ID] as i32);
        return Err(RuntimeError::DuplicateExpert { token, slot, earlier_slot, expert }.into());
    }
    if flags & FLAG_NON_FINITE_WEIGHT != 0 {
        let route = w[WORD_FIRST_NON_FINITE_WEIGHT];
        if route == u32::MAX {
            return Err(undecodable);
        }
        let (token, slot) = at(route);
        return Err(RuntimeError::NonFiniteRouterWeight { token, slot }.into());
    }
    if flags & FLAG_TILE_OVERFLOW != 0 {
        return Err(RecordError::TileOverflow(flags));
    }
    Err(undecodable)
}
