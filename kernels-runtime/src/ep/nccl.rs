#![allow(unsafe_code)] // NCCL's C API: each unsafe block says why it is sound
//! The collective on NCCL (feature `nccl`), through cudarc's bindings with the library
//! loaded at run time, so building needs no NCCL. Every operation is enqueued on each
//! driven rank's backend stream inside one NCCL group, without a host wait, so it is
//! captured with the rest of a step. NVLink multicast (NVLS) is not used by these
//! operations' algorithms as moegen calls them; shared machines run with
//! `NCCL_NVLS_ENABLE=0` all the same (docs/expert-parallel.md).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use cudarc::nccl::result;
use cudarc::nccl::sys;

use super::collective::{Collective, CollectiveError, Exchange, check_count};
use crate::backend::Backend;
use crate::backend::cuda::CudaBackend;

/// The 128-byte unique id every rank of a communicator initializes with: rank 0 makes it
/// ([`NcclId::new`]) and hands its bytes to the other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclId {
    bytes: [u8; 128],
}

impl NcclId {
    /// A fresh id (rank 0 of a communicator).
    pub fn new() -> Result<Self, CollectiveError> {
        library_present()?;
        let id = result::get_uniqueid().map_err(nccl("ncclGetUniqueId"))?;
        Ok(Self { bytes: id.internal.map(|c| c as u8) })
    }
    /// The id's bytes, to hand to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.bytes
    }
    /// An id received from rank 0.
    pub fn from_bytes(bytes: [u8; 128]) -> Self {
        Self { bytes }
    }
}

fn nccl(operation: &'static str) -> impl Fn(result::NcclError) -> CollectiveError {
    move |e| CollectiveError::Library { operation, reason: format!("{:?}", e.0) }
}

/// Refuses cleanly when NCCL cannot be loaded: cudarc would abort on the first call.
fn library_present() -> Result<(), CollectiveError> {
    use crate::backend::library::{NCCL, loadable};
    if loadable(NCCL) {
        Ok(())
    } else {
        Err(CollectiveError::Library {
            operation: "loading NCCL",
            reason: "no libnccl.so on the library path (a pip wheel ships libnccl.so.2: \
                     link it as libnccl.so in a folder of LD_LIBRARY_PATH)"
                .into(),
        })
    }
}

/// NCCL communicators of the ranks this process drives, each bound to its backend's stream.
#[derive(Debug)]
pub struct NcclCollective {
    comms: Vec<sys::ncclComm_t>,
    streams: Vec<Arc<CudaStream>>,
    ranks: Vec<usize>,
    world: usize,
}

impl NcclCollective {
    /// One process driving every rank: rank `i` is `backends[i]`'s device and stream.
    pub fn from_devices(backends: &[&CudaBackend]) -> Result<Self, CollectiveError> {
        library_present()?;
        let n = backends.len();
        if n == 0 {
            return Err(CollectiveError::RankCount { what: "backends", given: 0, expected: 1 });
        }
        let streams: Vec<Arc<CudaStream>> = backends.iter().map(|b| b.stream().clone()).collect();
        let ordinals: Vec<i32> = streams
            .iter()
            .map(|s| i32::try_from(s.context().ordinal()).unwrap_or(i32::MAX))
            .collect();
        let mut comms = vec![std::ptr::null_mut(); n];
        let count = i32::try_from(n).map_err(|_| CollectiveError::Size {
            what: "ranks",
            reason: format!("{n} does not fit NCCL's int"),
        })?;
        // SAFETY: `comms` has room for `n` handles and `ordinals` holds `n` device ordinals.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), count, ordinals.as_ptr()) }
            .map_err(nccl("ncclCommInitAll"))?;
        Ok(Self { comms, streams, ranks: (0..n).collect(), world: n })
    }

    /// One process per rank: this process is `rank` of `world`, on `backend`'s device and
    /// stream; every rank passes the id rank 0 made.
    pub fn from_rank(
        backend: &CudaBackend,
        rank: usize,
        world: usize,
        id: NcclId,
    ) -> Result<Self, CollectiveError> {
        library_present()?;
        if rank >= world {
            return Err(CollectiveError::Size {
                what: "rank",
                reason: format!("{rank} is outside the {world} ranks"),
            });
        }
        let int = |what: &'static str, v: usize| {
            i32::try_from(v).map_err(|_| CollectiveError::Size {
                what,
                reason: format!("{v} does not fit NCCL's int"),
            })
        };
        let (r, w) = (int("rank", rank)?, int("world", world)?);
        let stream = backend.stream().clone();
        stream.context().bind_to_thread().map_err(|e| CollectiveError::Library {
            operation: "cuCtxSetCurrent",
            reason: format!("{e:?}"),
        })?;
        let unique = sys::ncclUniqueId { internal: id.bytes.map(|b| b as std::ffi::c_char) };
        let mut comm = std::ptr::null_mut();
        // SAFETY: `comm` is a valid place for one handle; the device is current.
        unsafe { result::comm_init_rank(&mut comm, w, unique, r) }
            .map_err(nccl("ncclCommInitRank"))?;
        Ok(Self { comms: vec![comm], streams: vec![stream], ranks: vec![rank], world })
    }

    fn check(
        &self,
        backends: &[&mut dyn Backend],
        bufs: &[Exchange],
    ) -> Result<(), CollectiveError> {
        check_count("backends", backends.len(), self.ranks.len())?;
        check_count("buffers", bufs.len(), self.ranks.len())
    }

    /// Runs `each` for every driven rank (its comm, stream and buffers) in one NCCL group,
    /// so that one thread can drive several devices without deadlock.
    fn group(
        &self,
        operation: &'static str,
        bufs: &[Exchange],
        each: &dyn Fn(
            sys::ncclComm_t,
            sys::cudaStream_t,
            &Exchange,
        ) -> Result<(), result::NcclError>,
    ) -> Result<(), CollectiveError> {
        result::group_start().map_err(nccl("ncclGroupStart"))?;
        let mut first = Ok(());
        for ((&comm, stream), x) in self.comms.iter().zip(&self.streams).zip(bufs) {
            let s = stream.cu_stream() as sys::cudaStream_t;
            if let Err(e) = each(comm, s, x) {
                first = Err(e);
                break;
            }
        }
        // End the group whatever happened, so NCCL's group depth stays balanced.
        let ended = result::group_end();
        first.map_err(nccl(operation))?;
        ended.map_err(nccl("ncclGroupEnd"))?;
        Ok(())
    }
}

impl Drop for NcclCollective {
    fn drop(&mut self) {
        for &c in &self.comms {
            // SAFETY: each handle came from ncclCommInit* and is destroyed once; a failure
            // while dropping has no one to report to.
            let _ = unsafe { result::comm_destroy(c) };
        }
    }
}

/// Opens devices `0..ranks`, each with a stream of its own, for one process driving every
/// rank; refused, naming both counts, when the driver shows fewer GPUs.
pub fn open_devices(ranks: usize) -> Result<Vec<CudaBackend>, super::EpError> {
    if ranks == 0 {
        return Err(super::EpError::ZeroRanks);
    }
    if !crate::backend::cuda::driver_present() {
        return Err(
            crate::backend::BackendError::from(crate::backend::cuda::CudaError::NoDriver).into()
        );
    }
    let visible = cudarc::driver::CudaContext::device_count().map_err(|e| {
        CollectiveError::Library { operation: "cuDeviceGetCount", reason: format!("{e:?}") }
    })?;
    let visible = usize::try_from(visible).unwrap_or(0);
    if ranks > visible {
        return Err(super::EpError::NotEnoughDevices { ranks, visible });
    }
    (0..ranks).map(|r| Ok(CudaBackend::new(r)?)).collect()
}

fn ptr(p: crate::backend::DevicePtr) -> *mut std::ffi::c_void {
    p.0 as usize as *mut std::ffi::c_void
}

impl Collective for NcclCollective {
    fn world(&self) -> usize {
        self.world
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
        self.group("ncclAllGather", bufs, &|comm, s, x| {
            // SAFETY: the caller's buffers hold `bytes` (send) and `world·bytes` (receive)
            // on the comm's device; the call only enqueues work on `s`.
            unsafe {
                result::all_gather(
                    ptr(x.send),
                    ptr(x.recv),
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    comm,
                    s,
                )
            }
            .map(|_| ())
        })
    }

    fn reduce_scatter_bf16(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        elements: usize,
    ) -> Result<(), CollectiveError> {
        self.check(backends, bufs)?;
        self.group("ncclReduceScatter", bufs, &|comm, s, x| {
            // SAFETY: the caller's buffers hold `world·elements` (send) and `elements`
            // (receive) bf16 values on the comm's device; the call only enqueues work.
            unsafe {
                result::reduce_scatter(
                    ptr(x.send),
                    ptr(x.recv),
                    elements,
                    sys::ncclDataType_t::ncclBfloat16,
                    sys::ncclRedOp_t::ncclSum,
                    comm,
                    s,
                )
            }
            .map(|_| ())
        })
    }

    fn all_to_all(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        bytes: usize,
    ) -> Result<(), CollectiveError> {
        self.check(backends, bufs)?;
        let world = self.world;
        self.group("ncclSend/ncclRecv", bufs, &|comm, s, x| {
            for q in 0..world {
                let off = (q * bytes) as u64;
                let peer = q as i32;
                let (send, recv) = (x.send.0 + off, x.recv.0 + off);
                // SAFETY: both buffers hold `world·bytes` bytes on the comm's device; the
                // calls only enqueue work, matched inside one group.
                unsafe {
                    result::send(
                        ptr(crate::backend::DevicePtr(send)),
                        bytes,
                        sys::ncclDataType_t::ncclUint8,
                        peer,
                        comm,
                        s,
                    )?;
                    result::recv(
                        ptr(crate::backend::DevicePtr(recv)),
                        bytes,
                        sys::ncclDataType_t::ncclUint8,
                        peer,
                        comm,
                        s,
                    )?;
                }
            }
            Ok(())
        })
    }
}
