//! The test layer: shape, activations, routing and weights, and byte helpers.

use half::bf16;
use moegen_dsl::ActivationFormat;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::plan::{ExpertWindow, MoeShape};
use moegen_runtime::reference::{PreparedWeights, Routing, Sm90Weights, prepare_weights};

/// A deterministic xorshift64 generator.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Roughly normal.
    pub fn gauss(&mut self) -> f32 {
        (0..6).map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32).sum::<f32>() - 3.0
    }
}

/// One layer's inputs and NVFP4 weights.
pub struct Problem {
    pub shape: MoeShape,
    pub tokens: usize,
    pub x: Vec<bf16>,
    pub input_scale: f32,
    pub routing: Routing,
    pub weights: PreparedWeights,
}

/// `k` distinct experts per token, the first routed to the window's first local expert every
/// third token so some tiles fill up; router weights in [0.25, 0.75).
fn routing(r: &mut Rng, tokens: usize, experts: usize, first_local: usize, k: usize) -> Routing {
    let mut ids = Vec::with_capacity(tokens * k);
    let mut weights = Vec::with_capacity(tokens * k);
    for t in 0..tokens {
        let mut row: Vec<i32> = Vec::with_capacity(k);
        if t % 3 == 0 {
            row.push(first_local as i32);
        }
        while row.len() < k {
            let c = r.below(experts as u64) as i32;
            if !row.contains(&c) {
                row.push(c);
            }
        }
        ids.extend(row);
        weights.extend((0..k).map(|_| 0.25 + r.below(100) as f32 / 200.0));
    }
    Routing { tokens, experts: ids, weights }
}

impl Problem {
    /// `[H, I, E, offset, L, k, tokens]`: Gaussian weights (σ 0.05) and activations.
    pub fn new(dims: [usize; 7]) -> Result<Self, String> {
        let [h, i, e, off, l, k, tokens] = dims;
        let window = ExpertWindow::new(e, off, l, k).map_err(|e| e.to_string())?;
        let shape = MoeShape::new(h, i, window).map_err(|e| e.to_string())?;
        let mut r = Rng(777);
        let mut w = |n: usize| (0..n).map(|_| r.gauss() * 0.05).collect::<Vec<f32>>();
        let (up, gate, down) = (w(l * i * h), w(l * i * h), w(l * h * i));
        let x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(r.gauss())).collect();
        let amax = x.iter().map(|v| v.to_f32().abs()).fold(0f32, f32::max);
        let input_scale = 448.0 * 6.0 / amax;
        let weights = prepare_weights(&shape, &up, &gate, &down, input_scale, 448.0 * 6.0 / 2.0)
            .map_err(|e| e.to_string())?;
        let routing = routing(&mut r, tokens, e, off, k);
        Ok(Self { shape, tokens, x, input_scale, routing, weights })
    }

    /// The weights in the Hopper layout for an activation format.
    pub fn sm90(&self, activations: ActivationFormat) -> Result<Sm90Weights, String> {
        Sm90Weights::from_prepared(&self.shape, &self.weights, activations)
            .map_err(|e| e.to_string())
    }
}

/// Random MXFP4 weights: every E2M1 code, UE8M0 scales 2^−7 … 2^2 (each 32-block's code
/// repeated for both 16-halves), α = 1.
pub fn mxfp4_weights(shape: &MoeShape) -> Sm90Weights {
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    let mut r = Rng(4242);
    let mut codes = |n: usize| (0..n).map(|_| r.below(256) as u8).collect::<Vec<u8>>();
    let (w1, w2) = (codes(l * i * h), codes(l * h * i / 2));
    let mut r = Rng(99);
    let mut per32 = |n16: usize| {
        (0..n16 / 2)
            .flat_map(|_| {
                let c = 120 + r.below(10) as u8;
                [c, c]
            })
            .collect::<Vec<u8>>()
    };
    let (w1_scales, w2_scales) = (per32(l * i * h / 8), per32(l * h * i / 16));
    Sm90Weights {
        format: WeightFormat::Mxfp4,
        activations: ActivationFormat::Bf16,
        w1,
        w1_scales,
        w2,
        w2_scales,
        alpha1: vec![1.0; l],
        alpha2: vec![1.0; l],
        fc2_input_scale: 1.0,
    }
}

pub fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn bytes_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn bytes_bf16(v: &[bf16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}
pub fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}
