//! mbarrier objects (PTX ISA §9.7.13.15): an expected arrival count, the arrivals still
//! pending in the current phase, a transaction count, and the phase parity. A phase
//! completes when no arrival is pending and the tx-count is zero; the next phase starts
//! with the expected count again.

/// One barrier's state.
#[derive(Clone, Debug)]
pub(super) struct Mbar {
    pub expected: i64,
    pub pending: i64,
    pub tx: i64,
    /// Completed phases (parity = phase & 1).
    pub phase: u64,
    /// Unique id, used to tag asynchronous writes that complete on this barrier.
    pub id: u32,
}

impl Mbar {
    pub fn new(count: u32, id: u32) -> Self {
        Self { expected: i64::from(count), pending: i64::from(count), tx: 0, phase: 0, id }
    }

    /// Whether the phase with parity `parity` has completed (what try_wait.parity asks).
    pub fn parity_done(&self, parity: u64) -> bool {
        (self.phase & 1) != (parity & 1)
    }

    /// Applies `arrivals` arrivals and a tx-count change; returns true if a phase completed.
    pub fn update(&mut self, arrivals: i64, tx_delta: i64) -> bool {
        self.pending -= arrivals;
        self.tx += tx_delta;
        if self.pending <= 0 && self.tx == 0 {
            self.phase += 1;
            self.pending = self.expected;
            return true;
        }
        false
    }
}
