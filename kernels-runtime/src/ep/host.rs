//! An in-process collective over `G` backends driven by one thread, moving bytes through
//! the host (download, combine, upload). A test and simulation vehicle, so that the whole
//! `G`-rank layer runs on `G` simulator backends on the CPU: it waits for every rank's
//! device at each operation and cannot be captured. Production runs use NCCL
//! (`NcclCollective`, feature `nccl`).

use half::bf16;

use super::collective::{Collective, CollectiveError, Exchange, check_count};
use crate::backend::Backend;

/// Every rank of a `G`-rank communicator, in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCollective {
    ranks: Vec<usize>,
}

impl HostCollective {
    /// A communicator of `world` ranks, all driven here.
    pub fn new(world: usize) -> Self {
        Self { ranks: (0..world).collect() }
    }

    fn check(
        &self,
        backends: &[&mut dyn Backend],
        bufs: &[Exchange],
    ) -> Result<(), CollectiveError> {
        check_count("backends", backends.len(), self.ranks.len())?;
        check_count("buffers", bufs.len(), self.ranks.len())
    }
}

impl Collective for HostCollective {
    fn world(&self) -> usize {
        self.ranks.len()
    }

    fn driven(&self) -> &[usize] {
        &self.ranks
    }

    fn all_gather(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        bytes: usize,
    ) -> Result<(), CollectiveError> {
        self.check(backends, bufs)?;
        let mut all = Vec::with_capacity(bytes * bufs.len());
        for (b, x) in backends.iter_mut().zip(bufs) {
            all.extend(b.download(x.send, bytes)?);
        }
        for (b, x) in backends.iter_mut().zip(bufs) {
            b.upload(x.recv, &all)?;
        }
        Ok(())
    }

    fn reduce_scatter_bf16(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        elements: usize,
    ) -> Result<(), CollectiveError> {
        self.check(backends, bufs)?;
        let g = bufs.len();
        let mut sums = vec![0f32; g * elements];
        let mut first = true;
        for (b, x) in backends.iter_mut().zip(bufs) {
            let bytes = b.download(x.send, g * elements * 2)?;
            for (s, c) in sums.iter_mut().zip(bytes.chunks_exact(2)) {
                let v = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
                // Rank order, one bf16 rounding per addition, as a ring reduction rounds.
                *s = if first { v } else { bf16::from_f32(*s + v).to_f32() };
            }
            first = false;
        }
        for (r, (b, x)) in backends.iter_mut().zip(bufs).enumerate() {
            let block: Vec<u8> = sums[r * elements..(r + 1) * elements]
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes())
                .collect();
            b.upload(x.recv, &block)?;
        }
        Ok(())
    }

    fn all_to_all(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        bytes: usize,
    ) -> Result<(), CollectiveError> {
        self.check(backends, bufs)?;
        let g = bufs.len();
        let mut sent = Vec::with_capacity(g);
        for (b, x) in backends.iter_mut().zip(bufs) {
            sent.push(b.download(x.send, g * bytes)?);
        }
        for (q, (b, x)) in backends.iter_mut().zip(bufs).enumerate() {
            let recv: Vec<u8> =
                sent.iter().flat_map(|s| s[q * bytes..(q + 1) * bytes].iter().copied()).collect();
            b.upload(x.recv, &recv)?;
        }
        Ok(())
    }
}
