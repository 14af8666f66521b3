//! `tcgen05.ld/st.32x32b.x64` and `.x128` (the wide forms of the SM100 epilogue): every
//! register lands in its own column of the thread's lane.

use moegen_sim::{Arg, Device, LaunchConfig, launch, parse_module};

#[test]
fn wide_tmem_loads_and_stores_round_trip() {
    for n in [64usize, 128] {
        let regs =
            |base: usize| (0..n).map(|i| format!("%r{}", base + i)).collect::<Vec<_>>().join(", ");
        let fill: String =
            (0..n).map(|i| format!("\tadd.u32 %r{}, %r1, {};\n", 8 + i, 1000 * i)).collect();
        let stores: String =
            (0..n).map(|i| format!("\tst.global.u32 [%rd1+{}], %r{};\n", 4 * i, 300 + i)).collect();
        let text = format!(
            ".version 8.8\n.target sm_100a\n.address_size 64\n.extern .shared .align 16 .b8 smem[];\n\
             .visible .entry k(\n.param .u64 out\n)\n{{\n\t.reg .b32 %r<448>;\n\t.reg .b64 %rd<4>;\n\
             \tmov.u32 %r0, smem;\n\tmov.u32 %r1, %tid.x;\n\
             \ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], 512;\n\tld.shared.b32 %r2, [%r0];\n\
             \tadd.u32 %r3, %r2, 256;\n{fill}\
             \ttcgen05.st.sync.aligned.32x32b.x{n}.b32 [%r3], {{{}}};\n\ttcgen05.wait::st.sync.aligned;\n\
             \ttcgen05.ld.sync.aligned.32x32b.x{n}.b32 {{{}}}, [%r3];\n\ttcgen05.wait::ld.sync.aligned;\n\
             \tld.param.u64 %rd0, [out];\n\tmul.wide.u32 %rd2, %r1, {};\n\tadd.u64 %rd1, %rd0, %rd2;\n{stores}\
             \ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r2, 512;\n\tret;\n}}\n",
            regs(8),
            regs(300),
            4 * n
        );
        let m = parse_module(&text).unwrap();
        let mut dev = Device::new();
        let out = dev.alloc(32 * 4 * n);
        launch(&mut dev, &m, "k", &LaunchConfig::new(1, 32, 16), &[Arg::U64(out)]).unwrap();
        let got = dev.download(out, 32 * 4 * n).unwrap();
        for t in 0..32 {
            for i in 0..n {
                let at = 4 * (t * n + i);
                let v = u32::from_le_bytes([got[at], got[at + 1], got[at + 2], got[at + 3]]);
                assert_eq!(v, (t + 1000 * i) as u32, "x{n} thread {t} register {i}");
            }
        }
    }
}
