//! The expert-parallel all-to-all mode's padding id.
//!
//! A peer block of the all-to-all has a fixed `C` slots (the worst case, so the step stays
//! capturable); the slots past the routes actually packed carry [`NO_ROUTE`] as their expert
//! id. The owner's routing sort treats that id as a route of no expert: never local, never a
//! duplicate, and no error bit (any other id outside `[0, experts)` still raises
//! `FLAG_EXPERT_OUT_OF_RANGE`). Its weight is 0 and its home index −1, so nothing reads it.
//! `i32::MIN` rather than −1 because −1 is the commonest wrong id a router produces, which
//! must stay an error.

/// The expert id of an unused slot of a peer block.
pub const NO_ROUTE: i32 = i32::MIN;
