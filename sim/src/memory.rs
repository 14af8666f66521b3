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
    /// Where the next allocation may start: addresses are never handed out twice, so an
    /// access through a freed pointer stays an error instead of reaching a newer buffer.
    next: u64,
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
        let base = self.next.max(BASE);
        let len = bytes.max(1);
        self.next = (base + len as u64 + 4096).next_multiple_of(256);
        self.allocs.push(Alloc { base, data: vec![0; len] });
        base
    }

    /// Frees the allocation that starts at `addr`; false when none does.
    pub fn free(&mut self, addr: u64) -> bool {
        let Some(i) = self.allocs.iter().position(|a| a.base == addr) else {
            return false;
        };
        self.allocs.swap_remove(i);
        true
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

#[cfg(test)]
mod tests {
    use super::Device;

    #[test]
    fn freed_memory_is_gone_and_its_addresses_are_never_reused() {
        let mut d = Device::new();
        let a = d.alloc(64);
        let b = d.upload(&[7; 32]);
        assert!(d.free(a));
        assert!(d.slice(a, 1).is_none(), "a freed buffer cannot be read");
        assert!(!d.free(a), "a second free finds nothing");
        assert!(!d.free(b + 1), "only an allocation's own address frees it");
        let c = d.alloc(64);
        assert!(c > b, "new allocations never reuse freed addresses");
        assert_eq!(d.download(b, 32), Some(vec![7; 32]), "the others are untouched");
        assert!(d.free(b) && d.free(c));
        assert!(d.alloc(8) > c);
    }
}
