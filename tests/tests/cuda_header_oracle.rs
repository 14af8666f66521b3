//! moegen's E2M1/E4M3/UE8M0 encoders against NVIDIA's host emulation of the same `cvt`
//! instructions (cuda_fp4.hpp, cuda_fp8.hpp from the pinned PyPI wheels), input by input:
//! every code value, every rounding midpoint and its neighbours, every power of two and its
//! neighbours, specials, and 200 000 pseudo-random bit patterns, each with both signs.

use std::io::Write;
use std::process::{Command, Stdio};

use moegen_codegen::tools::{cuda_include, workspace_root};
use moegen_dsl::formats::*;
use moegen_tests::require;

fn push_around(v: &mut Vec<u32>, x: f32) {
    for y in [x, x.next_up(), x.next_down()] {
        v.push(y.to_bits());
        v.push((-y).to_bits());
    }
}

fn inputs() -> Vec<u32> {
    let mut v = Vec::new();
    let e2m1: Vec<f32> = (0u8..8).map(e2m1_to_f32).collect();
    let e4m3: Vec<f32> = (0u8..0x7F).map(e4m3_to_f32).collect();
    for table in [&e2m1, &e4m3] {
        for w in table.windows(2) {
            push_around(&mut v, w[0]);
            push_around(&mut v, ((f64::from(w[0]) + f64::from(w[1])) / 2.0) as f32);
        }
        push_around(&mut v, *table.last().unwrap_or(&0.0));
    }
    for e in -149..=127 {
        let p = 2f64.powi(e) as f32;
        push_around(&mut v, p);
        push_around(&mut v, p * 1.5);
    }
    for s in [0.0, f32::MAX, f32::INFINITY, f32::NAN, 464.0, 480.0, 6.5, 7.0, 0.25, 0.75] {
        push_around(&mut v, s);
    }
    v.extend([0x7F80_0001, 0xFF80_0001, 0x7FC0_0000, 0xFFC0_0000, 0x0040_0000, 0x0040_0001]);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u32);
    }
    v
}

#[test]
fn encoders_match_nvidia_host_emulation() {
    let include = require(cuda_include());
    let exe = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda_cvt_dump");
    let src = workspace_root().join("tests/oracle/cuda_cvt_dump.cpp");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-I"])
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler '{cxx}': {e}"));
    assert!(status.success(), "compiling {} failed", src.display());

    let ins = inputs();
    let mut child =
        Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let text: String = ins.iter().map(|b| format!("{b:08x}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let out = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), ins.len(), "one line per input");

    let mut mismatches = Vec::new();
    for (bits, line) in ins.iter().zip(&lines) {
        let f: Vec<u32> = line.split(' ').map(|h| u32::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(f[0], *bits);
        let x = f32::from_bits(*bits);
        use Ue8m0Rounding::*;
        let ours = [
            u32::from(f32_to_e2m1(x)),
            u32::from(f32_to_e4m3(x)),
            u32::from(f32_to_ue8m0(x, TowardZero, true)),
            u32::from(f32_to_ue8m0(x, TowardPosInf, true)),
            u32::from(f32_to_ue8m0(x, TowardZero, false)),
            u32::from(f32_to_ue8m0(x, TowardPosInf, false)),
            // float2 {x, 1.5}: .y is the PTX `a` operand, landing high.
            u32::from(cvt_e2m1x2(1.5, x)),
            u32::from(cvt_e4m3x2(1.5, x)),
        ];
        if ours[..] != f[1..] {
            mismatches.push(format!("{bits:08x} ({x:e}): ours {ours:x?}, NVIDIA {:x?}", &f[1..]));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} inputs differ; first: {:#?}",
        mismatches.len(),
        ins.len(),
        &mismatches[..mismatches.len().min(10)]
    );
}
