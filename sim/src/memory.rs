//! Device (global) memory: allocations at distinct, 256-byte-aligned addresses; every access
//! must fall inside one allocation.

/// One allocation.
#[derive(Clone, Debug)]
struct Alloc {
    base: u64,
    data: Vec<u8>,
}

/// The simulated device's global memory.
#[derive(Clone, Debug, Default)]
pub struct Device {
    allocs: Vec<Alloc>,
}

/// First address handed out; keeps 0 and small integers from ever being valid pointers.
const BASE: u64 = 0x7000_0000_0000;

impl Device {
    /// An empty device.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allocates `bytes` zeroed bytes; returns the address.
    pub fn alloc(&mut self, bytes: usize) -> u64 {
        let base = self
            .allocs
            .last()
            .map_or(BASE, |a| (a.base + a.data.len() as u64 + 4096).next_multiple_of(256));
        self.allocs.push(Alloc { base, data: vec![0; bytes.max(1)] });
        base
    }

    /// Allocates and fills.
    pub fn upload(&mut self, bytes: &[u8]) -> u64 {
        let a = self.alloc(bytes.len());
        if let Some(s) = self.slice_mut(a, bytes.len()) {
            s.copy_from_slice(bytes);
        }
        a
    }

    /// The bytes `[addr, addr+len)` if they lie inside one allocation.
    pub fn slice(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let a =
            self.allocs.iter().find(|a| addr >= a.base && addr < a.base + a.data.len() as u64)?;
        let start = (addr - a.base) as usize;
        a.data.get(start..start.checked_add(len)?)
    }

    /// Mutable form of [`Self::slice`].
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let a = self
            .allocs
            .iter_mut()
            .find(|a| addr >= a.base && addr < a.base + a.data.len() as u64)?;
        let start = (addr - a.base) as usize;
        a.data.get_mut(start..start.checked_add(len)?)
    }

    /// Copies an allocation's first `len` bytes out (None when out of bounds).
    pub fn download(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.slice(addr, len).map(<[u8]>::to_vec)
    }
}
