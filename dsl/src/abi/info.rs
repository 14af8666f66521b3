//! A generated kernel as the runtime sees it.

use super::identity::KernelId;
use super::launch::LaunchFacts;
use super::param::Param;

/// One generated kernel: identity, PTX, parameters and launch facts, all typed. The
/// generated crate (and a build script's output) holds these as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// What the kernel is.
    pub id: KernelId,
    /// PTX entry name (`id.name()`).
    pub name: &'static str,
    /// PTX `.target`.
    pub ptx_target: &'static str,
    /// The PTX module.
    pub ptx: &'static str,
    /// Parameters in ABI order.
    pub params: &'static [Param],
    /// Launch facts.
    pub launch: LaunchFacts,
}
