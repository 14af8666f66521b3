//! The expert-parallel all-to-all mode's padding id.
//!
//! A peer block of the all-to-all has a fixed `C` slots (the worst case, so the step stays
//! capturable); the slots past the routes actually packed carry [`NO_ROUTE`] as their expert
//! id. The owner's routing sort, launched with [`Padding::Skip`], treats that id as a route of
//! no expert: never local, never a duplicate, and no error bit (any other id outside
//! `[0, experts)` still raises `FLAG_EXPERT_OUT_OF_RANGE`); every other sort refuses it. Its
//! weight is 0 and its home index −1, so nothing reads it. `i32::MIN` rather than −1 because
//! −1 is the commonest wrong id a router produces, which must stay an error.

/// The expert id of an unused slot of a peer block.
pub const NO_ROUTE: i32 = i32::MIN;

/// What the routing sort does with [`NO_ROUTE`], chosen per launch (`Scalar::AcceptPadding`).
///
/// Only the all-to-all mode's owner sorts blocks it padded itself; every other caller's ids
/// come from a router, where `NO_ROUTE` is a wrong id like any other and must be reported
/// (token and slot), not dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Padding {
    /// `NO_ROUTE` is out of range: the error record's `FLAG_EXPERT_OUT_OF_RANGE`, and no
    /// exemption from the duplicate check (as −1).
    #[default]
    Refuse,
    /// `NO_ROUTE` is a route of no expert: never local, never a duplicate, no error bit.
    Skip,
}

impl Padding {
    /// The value of `Scalar::AcceptPadding`.
    pub const fn scalar(self) -> u64 {
        match self {
            Padding::Refuse => 0,
            Padding::Skip => 1,
        }
    }
}
