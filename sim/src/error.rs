//! Simulation errors: every failure names where it happened.

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The text is not PTX this parser reads.
    #[error("parse error at line {line}: {message}")]
    Parse {
        /// Line.
        line: usize,
        /// What.
        message: String,
    },
    /// An instruction the simulator does not model.
    #[error("line {line}: instruction `{opcode}` is not modelled")]
    Unsupported {
        /// Line.
        line: usize,
        /// Opcode.
        opcode: String,
    },
    /// A malformed instruction (operand kinds or counts).
    #[error("line {line}: `{opcode}`: {message}")]
    BadInstruction {
        /// Line.
        line: usize,
        /// Opcode.
        opcode: String,
        /// What.
        message: String,
    },
    /// A descriptor (tcgen05 instruction or shared-memory descriptor) with a field holding
    /// a value the simulator does not model.
    #[error(
        "line {line}: `{opcode}`: {descriptor} descriptor {value:#x}: {field} is {found:#x}, the simulator models only {expected}"
    )]
    Descriptor {
        /// Line.
        line: usize,
        /// Opcode.
        opcode: String,
        /// Which descriptor: "instruction", "A", "B" or "source".
        descriptor: &'static str,
        /// The whole descriptor.
        value: u64,
        /// The field, with its bits.
        field: &'static str,
        /// The field's value.
        found: u64,
        /// What the simulator models there.
        expected: &'static str,
    },
    /// A global access outside every allocation.
    #[error(
        "line {line}: global access of {size} B at {addr:#x} is out of bounds (block {block}, thread {thread})"
    )]
    GlobalOutOfBounds {
        /// Line.
        line: usize,
        /// Address.
        addr: u64,
        /// Bytes.
        size: usize,
        /// Block.
        block: u32,
        /// Thread.
        thread: u32,
    },
    /// A shared access outside the CTA's shared memory.
    #[error(
        "line {line}: shared access of {size} B at {addr:#x} is out of bounds ({limit} B; block {block}, thread {thread})"
    )]
    SharedOutOfBounds {
        /// Line.
        line: usize,
        /// Address.
        addr: u64,
        /// Bytes.
        size: usize,
        /// Shared bytes.
        limit: usize,
        /// Block.
        block: u32,
        /// Thread.
        thread: u32,
    },
    /// Every warp is blocked.
    #[error("deadlock in block {block}: {detail}")]
    Deadlock {
        /// Block.
        block: u32,
        /// Each waiting thread group's pc and condition.
        detail: String,
    },
    /// A read of shared memory whose asynchronous write has not completed through a barrier
    /// phase the reader could have waited on.
    #[error(
        "line {line}: block {block} reads shared byte {addr:#x} before the asynchronous copy that wrote it completed (missing mbarrier wait?)"
    )]
    AsyncRace {
        /// Line.
        line: usize,
        /// Block.
        block: u32,
        /// Shared offset.
        addr: u64,
    },
    /// A wgmma rule of the PTX ISA broken: an in-flight wgmma's registers or shared memory
    /// accessed before `wgmma.wait_group`, or a missing `wgmma.fence`.
    #[error("line {line}: `{opcode}`: block {block}: {detail}")]
    WgmmaHazard {
        /// Line.
        line: usize,
        /// Opcode.
        opcode: String,
        /// Block.
        block: u32,
        /// What happened.
        detail: String,
    },
    /// A TMEM allocation or access the PTX ISA does not allow.
    #[error("line {line}: `{opcode}`: {source}")]
    Tmem {
        /// Line.
        line: usize,
        /// Opcode.
        opcode: String,
        /// What was wrong.
        source: TmemError,
    },
    /// A CTA exited with TMEM still allocated.
    #[error("block {block} exited with TMEM columns {start}+{columns} still allocated")]
    TmemLeak {
        /// Block.
        block: u32,
        /// First column.
        start: u32,
        /// Columns.
        columns: u32,
    },
    /// The launch ran past its step limit.
    #[error(
        "block {block}: stopped after {limit} thread-instructions (last at line {line}): runaway loop?"
    )]
    StepLimit {
        /// Block.
        block: u32,
        /// The limit.
        limit: u64,
        /// Line last executed.
        line: usize,
    },
    /// A launch that does not match the kernel.
    #[error("launch: {0}")]
    Launch(String),
}

/// A TMEM allocation or access the PTX ISA does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TmemError {
    /// `tcgen05.alloc` of a column count that is not a power of two in 32..=512.
    #[error("tcgen05.alloc of {columns} columns: must be a power of two in 32..=512")]
    AllocSize {
        /// Columns asked for.
        columns: u32,
    },
    /// No aligned free range of the size asked for.
    #[error("tcgen05.alloc of {columns} columns: TMEM exhausted")]
    Exhausted {
        /// Columns asked for.
        columns: u32,
    },
    /// `tcgen05.dealloc` of a range that is not one allocation.
    #[error("tcgen05.dealloc of columns {start}+{columns}: not allocated")]
    NotAllocated {
        /// First column.
        start: u32,
        /// Columns.
        columns: u32,
    },
    /// An access outside every allocation (or past lane 127).
    #[error("TMEM access at lane {lane}, column {column} outside the allocation")]
    OutsideAllocation {
        /// Lane.
        lane: u32,
        /// Column.
        column: u32,
    },
    /// An operand's columns that do not lie in one allocation.
    #[error("TMEM columns {start}..{end} are not inside one allocation")]
    ColumnsSplit {
        /// First column.
        start: u32,
        /// One past the last column.
        end: u64,
    },
}

/// A tensor map [`crate::TensorMap::encode`] refuses: `cuTensorMapEncodeTiled`'s rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorMapError {
    /// Rank outside 1..=5, or box dimensions and strides that do not match it.
    #[error("rank {rank} with {box_dims} box dims and {strides} strides")]
    Rank {
        /// Dimensions.
        rank: usize,
        /// Box dimensions given.
        box_dims: usize,
        /// Strides given (rank − 1 expected).
        strides: usize,
    },
    /// A box dimension outside 1..=256.
    #[error("box dimensions {box_dims:?} must be in 1..=256")]
    BoxDims {
        /// The box.
        box_dims: Vec<u32>,
    },
    /// A swizzle span other than 0, 32, 64 or 128 bytes.
    #[error("swizzle {swizzle} is not 0, 32, 64 or 128")]
    Swizzle {
        /// The span given.
        swizzle: u32,
    },
    /// Base or strides not 16-byte multiples, or a stride of 2^40 bytes or more.
    #[error("base {address:#x} and strides {strides:?} must be multiples of 16 bytes below 2^40")]
    Alignment {
        /// Global base.
        address: u64,
        /// Strides in bytes.
        strides: Vec<u64>,
    },
    /// A packed 4-bit tensor with an odd innermost dimension.
    #[error("packed 4-bit tensors need an even innermost dimension, not {dim}")]
    OddPackedDim {
        /// The innermost dimension.
        dim: u64,
    },
    /// A 16U4_ALIGN16B (padded 4-bit) map breaking one of the driver's rules for that type.
    #[error("16U4_ALIGN16B tensor map: {rule} (found {value})")]
    PaddedU4 {
        /// The rule broken.
        rule: &'static str,
        /// The value that breaks it.
        value: u64,
    },
    /// An inner box row that is not a multiple of 16 bytes or exceeds the swizzle span.
    #[error(
        "inner box of {bytes} B does not fit the rules (16-B multiple, ≤ swizzle span {swizzle})"
    )]
    InnerBox {
        /// Bytes of one box row.
        bytes: u64,
        /// Swizzle span (0: none).
        swizzle: u32,
    },
}
