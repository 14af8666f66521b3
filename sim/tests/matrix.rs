//! ldmatrix/stmatrix against the PTX ISA fragment layout: lane l holds elements (l/4,
//! 2·(l%4)) and (l/4, 2·(l%4)+1) of each 8x8 matrix, rows addressed by lanes 8j..8j+8,
//! `.trans` reading the matrix column-major; a store of what was loaded puts it back.

use moegen_sim::{Arg, Device, LaunchConfig, SimError, launch, parse_module};

/// Loads four matrices (row pitch 32 bytes) with ldmatrix, stores the registers to `regs`,
/// stores them back with stmatrix (same addressing, 1024 bytes further) and copies that
/// region to `back`.
fn run(trans: bool, n: usize, extra: &str) -> Result<(Vec<u32>, Vec<u8>), SimError> {
    let t = if trans { ".trans" } else { "" };
    let regs: Vec<String> = (0..n).map(|j| format!("%r{}", 10 + j)).collect();
    let regs = regs.join(", ");
    let stores: String =
        (0..n).map(|j| format!("\tst.global.u32 [%rd3+{}], %r{};\n", 4 * j, 10 + j)).collect();
    let text = format!(
        ".version 8.8\n.target sm_90a\n.address_size 64\n.extern .shared .align 128 .b8 smem[];\n\
         .visible .entry k(\n.param .u64 inp,\n.param .u64 regs,\n.param .u64 back\n)\n{{\n\
         \t.reg .b32 %r<16>;\n\t.reg .b64 %rd<8>;\n\
         \tld.param.u64 %rd0, [inp];\n\tld.param.u64 %rd1, [regs];\n\tld.param.u64 %rd2, [back];\n\
         \tmov.u32 %r0, %tid.x;\n\tmov.u32 %r1, smem;\n\
         \tmul.wide.u32 %rd4, %r0, 32;\n\tadd.u64 %rd5, %rd0, %rd4;\n\
         \tld.global.v4.u32 {{%r2, %r3, %r4, %r5}}, [%rd5];\n\tmul.lo.u32 %r6, %r0, 32;\n\tadd.u32 %r7, %r1, %r6;\n\
         \tst.shared.v4.u32 [%r7], {{%r2, %r3, %r4, %r5}};\n\
         \tld.global.v4.u32 {{%r2, %r3, %r4, %r5}}, [%rd5+16];\n\tst.shared.v4.u32 [%r7+16], {{%r2, %r3, %r4, %r5}};\n\
         \tbar.sync 0;\n{extra}\
         \tldmatrix.sync.aligned.m8n8.x{n}{t}.shared.b16 {{{regs}}}, [%r7];\n\
         \tmul.wide.u32 %rd4, %r0, {};\n\tadd.u64 %rd3, %rd1, %rd4;\n{stores}\
         \tstmatrix.sync.aligned.m8n8.x{n}{t}.shared::cta.b16 [%r7+1024], {{{regs}}};\n\
         \tbar.sync 0;\n\tld.shared.v4.u32 {{%r2, %r3, %r4, %r5}}, [%r7+1024];\n\
         \tmul.wide.u32 %rd4, %r0, 32;\n\tadd.u64 %rd5, %rd2, %rd4;\n\
         \tst.global.v4.u32 [%rd5], {{%r2, %r3, %r4, %r5}};\n\
         \tld.shared.v4.u32 {{%r2, %r3, %r4, %r5}}, [%r7+1040];\n\tst.global.v4.u32 [%rd5+16], {{%r2, %r3, %r4, %r5}};\n\
         \tret;\n}}\n",
        4 * n
    );
    let m = parse_module(&text)?;
    let mut dev = Device::new();
    let inp: Vec<u8> = (0..512u16).flat_map(|e| (e * 7 + 3).to_le_bytes()).collect();
    let (i, r, b) = (dev.upload(&inp), dev.alloc(32 * 4 * n), dev.alloc(1024));
    launch(
        &mut dev,
        &m,
        "k",
        &LaunchConfig::new(1, 32, 2048),
        &[Arg::U64(i), Arg::U64(r), Arg::U64(b)],
    )?;
    let regs = dev.download(r, 32 * 4 * n).unwrap_or_default();
    let regs = regs.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok((regs, dev.download(b, 1024).unwrap_or_default()))
}

/// Element (row, col) of matrix j in the input (row pitch 16 elements, matrix 128).
fn elem(j: usize, row: usize, col: usize) -> u32 {
    let e = (128 * j + 16 * row + col) as u32;
    (e * 7 + 3) & 0xFFFF
}

#[test]
fn fragments_follow_the_ptx_layout_and_round_trip() {
    for trans in [false, true] {
        for n in [1, 2, 4] {
            let (regs, back) = run(trans, n, "").unwrap();
            for l in 0..32 {
                for j in 0..n {
                    let (r, c) = (l / 4, 2 * (l % 4));
                    let e = |h: usize| if trans { elem(j, c + h, r) } else { elem(j, r, c + h) };
                    assert_eq!(
                        regs[l * n + j],
                        e(0) | e(1) << 16,
                        "trans {trans} x{n} lane {l} matrix {j}"
                    );
                }
            }
            // The stored rows: the first 16 bytes of each 32-byte pitch of the first n
            // matrices; the rest untouched.
            for j in 0..4 {
                for row in 0..8 {
                    for col in 0..16 {
                        let at = 256 * j + 32 * row + 2 * col;
                        let got = u32::from(u16::from_le_bytes([back[at], back[at + 1]]));
                        let want = if j < n && col < 8 { elem(j, row, col) } else { 0 };
                        assert_eq!(got, want, "trans {trans} x{n} matrix {j} row {row} col {col}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_lane_must_take_part_and_rows_must_be_aligned() {
    let diverged = "\t.reg .pred %q<2>;\n\tsetp.eq.u32 %q0, %r0, 5;\n\t@%q0 add.u32 %r7, %r7, 8;\n";
    let e = run(false, 4, diverged).unwrap_err();
    assert!(e.to_string().contains("not aligned to 16 bytes"), "{e}");
    let exit = "\t.reg .pred %q<2>;\n\tsetp.eq.u32 %q0, %r0, 31;\n\t@%q0 ret;\n";
    let e = run(false, 4, exit).unwrap_err();
    assert!(e.to_string().contains("all 32 lanes"), "{e}");
}
