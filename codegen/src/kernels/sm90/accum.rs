//! The wgmma m64nNk16 f32 accumulator layout, as the epilogues read it: thread t of the
//! warpgroup (warp w, lane l) holds, per n8 block i, registers 4i + 2·v1 + v0 = element
//! (row 16w + l/4 + 8·v1, column 8i + 2·(l % 4) + v0). In the swap-AB GEMMs rows are weight
//! rows (h or output columns) and columns are the routing tile's tokens.

/// One accumulator element of this thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Element {
    /// Register index within a block's accumulator list.
    pub index: usize,
    /// n8 block.
    pub i: u32,
    /// Column offset within the thread's pair (0 or 1).
    pub v0: u32,
    /// Row offset: 0 (row r0) or 1 (row r0 + 8).
    pub v1: u32,
}

/// Every element of an m64 × `n` accumulator this thread holds, in register order.
pub fn elements(n: u32) -> impl Iterator<Item = Element> {
    (0..n / 8).flat_map(|i| {
        (0..2).flat_map(move |v1| {
            (0..2).map(move |v0| Element { index: (4 * i + 2 * v1 + v0) as usize, i, v0, v1 })
        })
    })
}
