//! Parameter, global and shared-memory access helpers.

use moegen_dsl::abi::{Buffer, ParamKind, ParamType, Scalar, TensorMap};

use super::KernelBuilder;
use crate::ptx::operand::Operand;
use crate::ptx::ops::Alu;
use crate::ptx::ops::memory::{ld, st};
use crate::ptx::reg::{Reg, RegClass};
use crate::ptx::types::{Space, Ty};

impl KernelBuilder {
    /// `ld.param.u32` of the kernel's parameter carrying `s`.
    pub fn ld_scalar(&mut self, s: Scalar) -> Reg {
        let p = self.param_by(ParamKind::Scalar(s));
        self.op(RegClass::B32, ld(Space::Param, Ty::U32), vec![p.at(0)])
    }
    /// `ld.param.u64` of the kernel's pointer to buffer `buf`.
    pub fn ld_buffer(&mut self, buf: Buffer) -> Reg {
        let p = self.param_by(ParamKind::Buffer(buf));
        self.op(RegClass::B64, ld(Space::Param, Ty::U64), vec![p.at(0)])
    }
    /// `ld.param.u32` of a validation kernel's argument `index` (those are bound by position).
    pub fn ld_arg_u32(&mut self, index: usize) -> Reg {
        let p = self.param_at(index, ParamType::U32);
        self.op(RegClass::B32, ld(Space::Param, Ty::U32), vec![p.at(0)])
    }
    /// `ld.param.u64` of a validation kernel's pointer argument `index`.
    pub fn ld_arg_u64(&mut self, index: usize) -> Reg {
        let p = self.param_at(index, ParamType::U64);
        self.op(RegClass::B64, ld(Space::Param, Ty::U64), vec![p.at(0)])
    }
    /// The generic address of the by-value tensor-map parameter carrying `m` (naming the
    /// param directly in `cp.async.bulk.tensor` is rejected by ptxas).
    pub fn tensor_map_addr(&mut self, m: TensorMap) -> Reg {
        let p = self.param_by(ParamKind::TensorMap(m));
        self.generic_param_addr(p)
    }
    /// The generic address of a validation kernel's tensor-map argument `index`.
    pub fn arg_tensor_map_addr(&mut self, index: usize) -> Reg {
        let p = self.param_at(index, ParamType::TensorMap);
        self.generic_param_addr(p)
    }
    fn generic_param_addr(&mut self, p: Operand) -> Reg {
        let d = self.op(RegClass::B64, Alu::Mov(Ty::U64), vec![p]);
        self.emit_to(d, Alu::Cvta(Space::Param, Ty::U64), vec![d.into()]);
        d
    }
    /// `prefetch.tensormap [map]` of a generic tensor-map address.
    pub fn prefetch_tensormap(&mut self, map: Reg) {
        self.emit(crate::ptx::ops::Memory::PrefetchTensormap, vec![Operand::addr(map)]);
    }
    /// The 32-bit shared-window address of the dynamic shared array plus `offset`.
    pub fn smem_addr(&mut self, offset: u32) -> Reg {
        self.dynamic_smem = true;
        let base = self.op(RegClass::B32, Alu::Mov(Ty::U32), vec![Operand::SharedArray]);
        if offset == 0 { base } else { self.add_u32(base, offset) }
    }

    /// `ld.global.ty d, [addr]`.
    pub fn ld_global(&mut self, ty: Ty, class: RegClass, addr: Reg) -> Reg {
        self.op(class, ld(Space::Global, ty), vec![Operand::addr(addr)])
    }
    /// `ld.shared.ty d, [addr]`.
    pub fn ld_shared(&mut self, ty: Ty, class: RegClass, addr: Reg) -> Reg {
        self.op(class, ld(Space::Shared, ty), vec![Operand::addr(addr)])
    }
    /// `st.global.ty [addr], v`.
    pub fn st_global(&mut self, ty: Ty, addr: Reg, v: impl Into<Operand>) {
        self.emit(st(Space::Global, ty), vec![Operand::addr(addr), v.into()]);
    }
    /// `st.shared.ty [addr], v`.
    pub fn st_shared(&mut self, ty: Ty, addr: Reg, v: impl Into<Operand>) {
        self.emit(st(Space::Shared, ty), vec![Operand::addr(addr), v.into()]);
    }
}
