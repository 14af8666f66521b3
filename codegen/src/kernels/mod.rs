//! Kernel builders: one module per kernel family.

pub mod corpus;
pub mod corpus_mufu;
pub mod corpus_wgmma;
pub mod e4m3_scale;
pub mod ep_copy;
pub mod ep_pack;
pub mod epilogue_math;
pub mod finalize_reduce;
pub mod local_route;
pub mod moe_sort;
pub mod moe_sort_single;
pub mod pipeline;
pub mod qdq;
pub mod quant_fp8;
pub mod quantize;
pub mod quantize_mxfp8;
pub mod skeleton;
pub mod sm100;
pub mod sm90;
pub mod sync;
