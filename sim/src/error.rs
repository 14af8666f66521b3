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
