//! The state of one cluster while it runs: threads, CTAs, mbarriers and the bookkeeping of
//! asynchronous writes that are not yet visible.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::mbarrier::Mbar;
use super::tmem::Tmem;
use super::wgmma::Warpgroup;
use crate::Kernel;
use crate::profile::Profile;

/// A multiply-rotate hasher for the small integer keys of barrier maps, which are looked up
/// on every wake-up check; the default SipHash dominated those.
#[derive(Default)]
pub(super) struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub(super) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// What a thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Running,
    /// Waiting at named barrier `id` for `count` threads (0: every live thread of the CTA).
    Barrier {
        id: u32,
        count: u32,
    },
    ClusterBarrier,
    /// Waiting in `bar.warp.sync` for the other lanes of `mask`.
    WarpSync {
        mask: u32,
    },
    WaitMbar {
        cta: usize,
        off: u32,
        parity: u64,
    },
    /// Waiting at the warpgroup instruction at `pc` for the rest of the warpgroup.
    Warpgroup {
        pc: usize,
    },
    Exited,
}

#[derive(Clone, Debug)]
pub(super) struct Thread {
    pub regs: Vec<u64>,
    pub pc: usize,
    pub state: State,
    /// Shared ranges (cta, offset, length) written by this thread's cp.async copies that no
    /// `cp.async.mbarrier.arrive` has tied to a barrier yet.
    pub cp_async: Vec<(usize, u32, u32)>,
    /// Committed cp.async groups not yet waited for, oldest first.
    pub cp_groups: Vec<Vec<(usize, u32, u32)>>,
}

pub(super) struct Cta {
    pub ctaid: u32,
    /// Threads that passed `bar.arrive` on each named barrier in its current phase.
    pub arrivals: [u32; 16],
    pub shared: Vec<u8>,
    /// Per shared byte: 0 when visible, else the id of the barrier whose phase completion
    /// publishes the asynchronous write that produced it.
    pub tags: Vec<u32>,
    pub threads: Vec<Thread>,
    pub tmem: Tmem,
    /// `tcgen05.relinquish_alloc_permit` was executed.
    pub relinquished: bool,
    /// The wgmma state of each warpgroup (empty when the kernel has no warpgroup
    /// instructions).
    pub warpgroups: Vec<Warpgroup>,
    /// Per shared byte: how many in-flight wgmmas read it (empty without wgmma).
    pub wg_locks: Vec<u16>,
    /// Registers per thread released by `setmaxnreg.dec` and not yet taken by `.inc`, in
    /// units of one warpgroup's per-thread count.
    pub reg_pool: u32,
}

pub(super) struct Cluster<'a> {
    pub kernel: &'a Kernel,
    pub params: &'a [u8],
    pub ctas: Vec<Cta>,
    pub mbars: IntMap<(usize, u32), Mbar>,
    pub next_id: u32,
    /// Shared ranges waiting for the phase completion of the barrier with this id.
    pub pending: IntMap<u32, Vec<(usize, u32, u32)>>,
    pub block: u32,
    pub grid: u32,
    pub cluster_size: u32,
    pub cluster_id: u32,
    pub step_limit: u64,
    pub thread_instructions: u64,
    pub mma_instructions: u64,
    pub profile: Option<Profile>,
    pub rng: Option<u64>,
}

/// What a thread does after an instruction.
pub(super) enum Control {
    Next,
    Jump(usize),
    Block(State),
    Exit,
}
