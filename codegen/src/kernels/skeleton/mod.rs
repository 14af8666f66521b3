//! What the SM100 and Hopper GEMMs share: the persistent kernel's skeleton. Each target
//! supplies its role bodies (TMA, tcgen05 and TMEM on SM100; bulk copies, register
//! dequantization and wgmma on Hopper); the skeleton supplies where stages live
//! (`stages`), the token row a permuted row gathers (`token_row`), the set-up every role
//! runs first (`prologue`) and the values it leaves every role (`common`), the
//! warps' branch to their role's body (`dispatch`) and the static persistent schedule with its K loop
//! (`scheduler`).

mod common;
mod dispatch;
mod prologue;
mod scheduler;
mod stages;
mod token_row;

pub use common::Common;
pub use dispatch::{Routes, WarpSpan};
pub use prologue::{Threads, init_barriers, threads};
pub use scheduler::{ClusterPlace, KTail, NBlocks, Needs, ProblemShape, TileScheduler, Unit};
pub use stages::stage_base;
pub use token_row::{TokenRow, token_of_row};
