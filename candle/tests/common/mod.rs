//! A small gpt-oss-layout checkpoint written with candle, shared by the tests.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};

pub const H: usize = 256;
pub const I: usize = 128;
pub const E: usize = 4;
pub const LAYER: usize = 0;

/// A deterministic generator of bytes.
pub struct Rng(pub u64);

impl Rng {
    pub fn byte(&mut self) -> u8 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u8
    }
}

pub fn name(t: &str) -> String {
    format!("model.layers.{LAYER}.mlp.experts.{t}")
}

/// gpt-oss's tensors: random E2M1 codes, scales 2^-4..2^0 around 1/sqrt(fan-in), small
/// biases.
pub fn gpt_oss_tensors(seed: u64) -> HashMap<String, Tensor> {
    let mut r = Rng(seed);
    let cpu = Device::Cpu;
    let mut t = HashMap::new();
    let mut u8s = |n: usize, f: &mut dyn FnMut(&mut Rng) -> u8| -> Vec<u8> {
        (0..n).map(|_| f(&mut r)).collect()
    };
    let blocks = |v: Vec<u8>, d: &[usize]| Tensor::from_vec(v, d, &cpu).unwrap();
    let gu = u8s(E * 2 * I * H / 2, &mut |r| r.byte());
    t.insert(name("gate_up_proj_blocks"), blocks(gu, &[E, 2 * I, H / 32, 16]));
    let gus = u8s(E * 2 * I * H / 32, &mut |r| 120 + r.byte() % 4);
    t.insert(name("gate_up_proj_scales"), blocks(gus, &[E, 2 * I, H / 32]));
    let d = u8s(E * H * I / 2, &mut |r| r.byte());
    t.insert(name("down_proj_blocks"), blocks(d, &[E, H, I / 32, 16]));
    let ds = u8s(E * H * I / 32, &mut |r| 120 + r.byte() % 4);
    t.insert(name("down_proj_scales"), blocks(ds, &[E, H, I / 32]));
    let bias = |n: usize, r: &mut Rng| -> Vec<f32> {
        (0..n).map(|_| (r.byte() as f32 - 128.0) / 512.0).collect()
    };
    let mut r2 = Rng(seed ^ 0x5eed);
    let b = Tensor::from_vec(bias(E * 2 * I, &mut r2), (E, 2 * I), &cpu).unwrap();
    t.insert(name("gate_up_proj_bias"), b.to_dtype(DType::BF16).unwrap());
    let b = Tensor::from_vec(bias(E * H, &mut r2), (E, H), &cpu).unwrap();
    t.insert(name("down_proj_bias"), b.to_dtype(DType::BF16).unwrap());
    t
}

/// Writes `tensors` to a fresh file under the target directory.
pub fn write(test: &str, tensors: &HashMap<String, Tensor>) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("moegen-candle");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{test}.safetensors"));
    candle_core::safetensors::save(tensors, &path).unwrap();
    path
}
