//! The epilogue activations of `epilogue_math`: each operation sequence against the
//! textbook function in f64, the clamps where they bite, and PTX's min/max semantics.

use moegen_dsl::Activation;
use moegen_dsl::epilogue_math::{
    ActivationParams, activation_exact, gemm2_value, pre_activation, ptx_max, ptx_min,
};

const P: ActivationParams = ActivationParams::GPT_OSS;

fn close(a: f32, b: f64, what: &str) {
    // exp_f32 is within 2 ulp; the add, division and products round once each.
    let tol = 8.0 * f64::from(f32::EPSILON) * b.abs().max(1e-30);
    assert!((f64::from(a) - b).abs() <= tol, "{what}: {a} vs {b}");
}

#[test]
fn activations_follow_their_definitions() {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    for i in -40..=40 {
        for j in -40..=40 {
            let (u, g) = (i as f32 * 0.37, j as f32 * 0.29);
            let (uf, gf) = (f64::from(u), f64::from(g));
            close(activation_exact(Activation::Swiglu, &P, u, g), uf * gf * sig(gf), "swiglu");
            let gc = gf.min(7.0);
            let uc = uf.clamp(-7.0, 7.0);
            let want = gc * sig(1.702f32 as f64 * gc) * (uc + 1.0);
            close(activation_exact(Activation::SwigluClamped, &P, u, g), want, "clamped");
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let gelu = 0.5 * gf * (1.0 + (c * (gf + 0.044715 * gf * gf * gf)).tanh());
            let got = activation_exact(Activation::GegluTanh, &P, u, g);
            // The f32 constants and the sigmoid form: a few ulp of the product.
            assert!(
                (f64::from(got) - uf * gelu).abs() <= 1e-5 * (uf * gelu).abs().max(1e-6),
                "geglu {u} {g}: {got} vs {}",
                uf * gelu
            );
        }
    }
}

#[test]
fn the_clamps_bite_where_gpt_oss_clamps() {
    // gate above the limit is the limit; up outside ±limit is ±limit.
    let at = |u, g| activation_exact(Activation::SwigluClamped, &P, u, g);
    assert_eq!(at(0.5, 30.0), at(0.5, 7.0));
    assert_eq!(at(50.0, 2.0), at(7.0, 2.0));
    assert_eq!(at(-50.0, 2.0), at(-7.0, 2.0));
    // β shifts up: with u = −β the output is zero.
    assert_eq!(at(-1.0, 3.0), 0.0);
    // Very negative gates give (signed) zero, not NaN.
    assert!(at(3.0, -200.0) <= 0.0 && at(3.0, -200.0) > -1e-30);
}

#[test]
fn min_and_max_are_ptxs() {
    assert_eq!(ptx_min(f32::NAN, 2.0), 2.0);
    assert_eq!(ptx_min(2.0, f32::NAN), 2.0);
    assert_eq!(ptx_max(f32::NAN, -2.0), -2.0);
    assert!(ptx_min(-0.0, 0.0).is_sign_negative() && ptx_min(0.0, -0.0).is_sign_negative());
    assert!(ptx_max(-0.0, 0.0).is_sign_positive() && ptx_max(0.0, -0.0).is_sign_positive());
    assert_eq!((ptx_min(1.0, 3.0), ptx_max(1.0, 3.0)), (1.0, 3.0));
}

#[test]
fn biases_round_once() {
    // fma: α·acc + b with one rounding, not two.
    let (a, acc, b) = (1.0 + f32::EPSILON, 1.0 - f32::EPSILON, -1.0);
    assert_eq!(pre_activation(a, acc, Some(b)), a.mul_add(acc, b));
    assert_ne!(pre_activation(a, acc, Some(b)), a * acc + b);
    assert_eq!(pre_activation(a, acc, None), a * acc);
    // GEMM2: without a bias acc · (α2 · w); with one fma(acc, α2, b) · w.
    assert_eq!(gemm2_value(3.0, 0.5, 0.25, None), 3.0 * (0.5 * 0.25));
    assert_eq!(gemm2_value(3.0, 0.5, 0.25, Some(1.0)), (3.0f32).mul_add(0.5, 1.0) * 0.25);
}

#[test]
fn relu2_is_max_then_one_product_and_reads_no_gate() {
    use moegen_dsl::epilogue_math::fast::activation_fast;
    let at = |x: f32, gate: f32| activation_exact(Activation::Relu2, &P, x, gate);
    for i in -200..=200 {
        let x = i as f32 * 0.173;
        let want = if x > 0.0 { x * x } else { 0.0 };
        // The gate operand is not read: ungated, W1 has I rows.
        assert_eq!(at(x, 1e30).to_bits(), want.to_bits(), "{x}");
        assert_eq!(at(x, f32::NAN).to_bits(), want.to_bits(), "{x}");
        // No sigmoid: the Fast recipe's value is the Exact one's.
        assert_eq!(activation_fast(Activation::Relu2, &P, x, 0.0).to_bits(), want.to_bits());
    }
    // max.f32: −0 and NaN give +0; the square rounds once (overflow to +inf).
    assert_eq!(at(-0.0, 0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(at(f32::NAN, 0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(at(f32::MAX, 0.0), f32::INFINITY);
    let x = 1.0 + f32::EPSILON;
    assert_eq!(at(x, 0.0), x * x);
    // Not gated: W1 has I rows.
    assert!(!Activation::Relu2.gated() && Activation::GegluTanh.gated());
    assert_eq!((Activation::Relu2.w1_rows(64), Activation::Swiglu.w1_rows(64)), (64, 128));
}
