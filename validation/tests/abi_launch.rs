//! One source of truth per kernel interface: for every kernel of the set, the launch the
//! runtime builds from the typed ABI matches the kernel's PTX (parameter names, order, sizes,
//! alignment, `.reqntid`, `.reqnctapercluster`) and the JSON manifest. The PTX is read by the
//! simulator's parser, which shares no code with codegen.

use moegen_dsl::abi::{
    Buffer, KernelId, KernelInfo, MapDims, ParamKind, ParamType, Scalar, launch_facts,
};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::backend::{Backend, KernelArg, TensorMapSpec, TmaElement};
use moegen_runtime::launch::{Bindings, GridInputs, LaunchError, kernel_args, launch_shape};

/// A problem every kernel can be bound to: H 512, I 512 (four of A8's 128-element K stages in
/// each GEMM, as a split of 4 needs), 8 local experts.
const H: u64 = 512;
const I: u64 = 512;
const L: u64 = 8;
const ROWS: u64 = 1024;

fn bindings(b: &mut SimBackend) -> Bindings {
    let mut bind = Bindings::new().map_dims(MapDims {
        hidden: H,
        intermediate: I,
        local_experts: L,
        permuted_rows: ROWS,
    });
    for (i, s) in Scalar::ALL.into_iter().enumerate() {
        bind = bind.scalar(s, 100 + i as u64).unwrap();
    }
    for buf in Buffer::ALL {
        // Large enough for any tensor map of this problem (W1: L·2I·H/2 bytes).
        bind = bind.buffer(buf, b.alloc((L * 2 * I * H) as usize).unwrap());
    }
    bind
}

/// Positional arguments of a validation kernel, one per declared type.
fn positional(b: &mut SimBackend, k: &KernelInfo) -> Vec<KernelArg> {
    k.params
        .iter()
        .map(|p| match p.ty() {
            ParamType::U32 => KernelArg::U32(0),
            ParamType::U64 => KernelArg::Ptr(b.alloc(64).unwrap()),
            ParamType::TensorMap => {
                let address = b.alloc(4096).unwrap();
                let spec = TensorMapSpec {
                    element: TmaElement::U8,
                    address,
                    dims: vec![64, 64],
                    strides: vec![64],
                    box_dims: vec![16, 8],
                    swizzle: 0,
                };
                KernelArg::TensorMap(Box::new(b.encode_tensor_map(&spec).unwrap()))
            }
        })
        .collect()
}

#[test]
fn every_launch_matches_its_ptx_and_the_manifest() {
    let manifest: serde_json::Value = serde_json::from_str(moegen_kernels::MANIFEST_JSON).unwrap();
    let entries = manifest["kernels"].as_array().unwrap();
    let mut sim = SimBackend::new();
    let base = bindings(&mut sim);
    let mut seen = 0;
    for k in moegen_kernels::kernels() {
        seen += 1;
        let module = moegen_sim::parse_module(k.ptx).unwrap();
        assert_eq!(module.kernels.len(), 1, "{}", k.name);
        let ptx = &module.kernels[0];
        assert_eq!(ptx.name, k.name);
        assert_eq!(k.id.name(), k.name);
        // Parameters: the PTX's, in order, with the ABI's sizes and alignment.
        let names: Vec<&str> = ptx.params.iter().map(|p| p.name.as_str()).collect();
        let abi_names: Vec<&str> = k.params.iter().map(|p| p.name).collect();
        assert_eq!(names, abi_names, "{}", k.name);
        for (decl, p) in ptx.params.iter().zip(k.params) {
            assert_eq!(decl.size, p.ty().size(), "{} {}", k.name, p.name);
            assert_eq!(decl.align.max(p.ty().align()), p.ty().align(), "{} {}", k.name, p.name);
        }
        assert_eq!(k.params, moegen_dsl::abi::params(&k.id), "{}", k.name);
        // Launch facts: the ABI's, the PTX's directives, the manifest's.
        assert_eq!(k.launch, launch_facts(&k.id).unwrap(), "{}", k.name);
        assert_eq!(ptx.reqntid, Some(k.launch.threads), "{}", k.name);
        assert_eq!(ptx.reqnctapercluster.unwrap_or(1), k.launch.cluster, "{}", k.name);
        let e = entries.iter().find(|e| e["name"] == k.name).unwrap();
        assert_eq!(e["threads"], k.launch.threads);
        assert_eq!(e["cluster_dims"][0], k.launch.cluster);
        assert_eq!(e["dynamic_smem"]["fixed"], k.launch.smem.fixed);
        assert_eq!(e["dynamic_smem"]["per_local_expert"], k.launch.smem.per_local_expert);
        assert_eq!(e["tmem_columns"], k.launch.tmem_columns);
        let listed: Vec<(&str, &str)> = e["params"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["type"].as_str().unwrap()))
            .collect();
        let want: Vec<(&str, String)> =
            k.params.iter().map(|p| (p.name, format!("{:?}", p.ty()))).collect();
        assert_eq!(listed.len(), want.len(), "{}", k.name);
        for ((n, t), (wn, wt)) in listed.iter().zip(&want) {
            assert_eq!((*n, *t), (*wn, wt.as_str()), "{}", k.name);
        }
        // The runtime's arguments: one per parameter, of its type, in order.
        let bind = match k.id {
            KernelId::Corpus(_) => Bindings::new().positional(positional(&mut sim, k)),
            _ => base.clone(),
        };
        let args = kernel_args(&mut sim, k, &bind).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.len(), ptx.params.len(), "{}", k.name);
        for (a, p) in args.iter().zip(k.params) {
            assert_eq!(a.ty(), p.ty(), "{} {}", k.name, p.name);
        }
        let grid = GridInputs {
            routes: 3000,
            tokens: 300,
            hidden: H,
            intermediate: I,
            max_tiles: 12,
            local_experts: L,
            sm_count: 148,
            permuted_rows: 12 * 128,
        };
        let shape = launch_shape(k, &grid).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(shape.block, k.launch.threads);
        assert_eq!(shape.cluster, k.launch.cluster);
        assert_eq!(shape.grid % shape.cluster, 0, "{}", k.name);
        assert_eq!(
            shape.dynamic_smem,
            k.launch.smem.fixed + k.launch.smem.per_local_expert * L as u32
        );
    }
    assert_eq!(seen, entries.len(), "every manifest kernel is reachable with all features");
}

#[test]
fn a_missing_binding_names_the_kernel_and_parameter() {
    let mut sim = SimBackend::new();
    let k = moegen_kernels::kernels().find(|k| matches!(k.id, KernelId::Gemm(_))).unwrap();
    let mut bind = bindings(&mut sim);
    // A fresh set without the router weights.
    let mut partial = Bindings::new().map_dims(MapDims {
        hidden: H,
        intermediate: I,
        local_experts: L,
        permuted_rows: ROWS,
    });
    for s in Scalar::ALL {
        partial = partial.scalar(s, 1).unwrap();
    }
    for buf in Buffer::ALL.into_iter().filter(|&b| b != Buffer::Alpha1) {
        partial = partial.buffer(buf, bind.buffer_ptr(buf).unwrap());
    }
    bind = partial;
    let err = kernel_args(&mut sim, k, &bind).unwrap_err();
    assert_eq!(err, LaunchError::Unbound { kernel: k.name, param: "alpha", what: "alpha1".into() });
    assert!(matches!(
        Bindings::new().scalar(Scalar::Hidden, 1 << 40),
        Err(LaunchError::ScalarTooLarge { what: Scalar::Hidden, .. })
    ));
    // Positional arguments of the wrong type are refused.
    let corpus = moegen_kernels::kernels().find(|k| matches!(k.id, KernelId::Corpus(_))).unwrap();
    let wrong: Vec<KernelArg> = corpus.params.iter().map(|_| KernelArg::U32(0)).collect();
    let needs_ptr = corpus.params.iter().any(|p| p.kind != ParamKind::Validation(ParamType::U32));
    assert!(needs_ptr);
    assert!(matches!(
        kernel_args(&mut sim, corpus, &Bindings::new().positional(wrong)),
        Err(LaunchError::Arguments { .. })
    ));
}
