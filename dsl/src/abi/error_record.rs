//! The device-side error record: what the routing kernels write when an input can only be
//! checked on the device (the caller's expert ids and router weights live in device memory),
//! decoded by the runtime into the same typed errors the host checks raise.
//!
//! Seven `u32` words. The runtime resets every word to !0 before a forward (one memset:
//! the flag word holds the flags inverted, a raised flag being a cleared bit); the kernels
//! only clear flag bits (`red.and`) and take minima (the words naming a first offender's
//! details are written by the one thread whose route won that minimum, in a later launch),
//! so the decoded route is the first offending one in expanded order whatever the
//! scheduling.

/// Word 0: the flag bits, inverted (!0: no flag raised).
pub const WORD_FLAGS: usize = 0;
/// Word 1: the first route (token·top_k + slot) whose router weight is not finite.
pub const WORD_FIRST_NON_FINITE_WEIGHT: usize = 1;
/// Word 2: the first route whose expert id is outside [0, experts).
pub const WORD_FIRST_BAD_EXPERT: usize = 2;
/// Word 3: that route's expert id (written by the scatter pass, which runs after every
/// histogram block has taken its minimum).
pub const WORD_BAD_EXPERT_ID: usize = 3;
/// Word 4: the first route whose expert id already appears at an earlier slot of the same
/// token.
pub const WORD_FIRST_DUPLICATE_EXPERT: usize = 4;
/// Word 5: the earliest slot of that token with the same id (written by the scatter pass).
pub const WORD_DUPLICATE_EARLIER_SLOT: usize = 5;
/// Word 6: the duplicated expert id (written by the scatter pass).
pub const WORD_DUPLICATE_EXPERT_ID: usize = 6;
/// Words in the record.
pub const WORDS: usize = 7;

/// Flag: an expert id outside [0, experts).
pub const FLAG_EXPERT_OUT_OF_RANGE: u32 = 1 << 0;
/// Flag: the routing produced more tiles than the tile arrays hold (a planning bug: the
/// plan's bound is exact, so this never fires on a plan from `plan_workspace`).
pub const FLAG_TILE_OVERFLOW: u32 = 1 << 1;
/// Flag: a router weight is NaN or infinite.
pub const FLAG_NON_FINITE_WEIGHT: u32 = 1 << 2;
/// Flag: a token routes to the same expert at two of its slots.
pub const FLAG_DUPLICATE_EXPERT: u32 = 1 << 3;
/// Every flag the kernels raise.
pub const ALL_FLAGS: u32 =
    FLAG_EXPERT_OUT_OF_RANGE | FLAG_TILE_OVERFLOW | FLAG_NON_FINITE_WEIGHT | FLAG_DUPLICATE_EXPERT;

/// The byte offset of `word` in the record.
pub const fn byte_offset(word: usize) -> u64 {
    (word * 4) as u64
}
