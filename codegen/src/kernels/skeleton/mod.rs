//! What the SM100 and Hopper GEMMs share: the persistent kernel's skeleton. Each target
//! supplies its role bodies (TMA, tcgen05 and TMEM on SM100; bulk copies, register
//! dequantization and wgmma on Hopper); the skeleton supplies where stages live
//! (`stages`), the token row a permuted row gathers (`token_row`), the set-up every role
//! runs first (`prologue`) and the static persistent schedule with its K loop
//! (`scheduler`).

mod stages;

pub use stages::stage_base;
