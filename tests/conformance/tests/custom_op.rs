//! A custom op's WGSL kernel on the device under test (`KILN_CONFORMANCE_DEVICE`: wgpu, cuda
//! or cpu) against its CPU reference, forward and backward, on odd shapes and strided views;
//! and the errors of a kernel naga rejects and of a CPU-only op on a GPU.

#[allow(dead_code)]
#[path = "../../../native/examples/custom_op/scaled_softmax.rs"]
mod scaled_softmax;

use kiln_conformance::{check, data, same};
use kiln_core::op::custom::{Attrs, CustomOp, Grid, KernelLaunch};
use kiln_core::{DType, Meta, Result, Tensor, TensorData};
use scaled_softmax::{ScaledSoftmax, scaled_softmax};
use std::sync::Arc;

fn transposed(_: usize, x: Tensor) -> Result<Tensor> {
    x.transpose(-1, -2)
}

#[test]
fn scaled_softmax_kernel_matches_its_cpu_reference() {
    let Some(dev) = kiln_conformance::device() else {
        return;
    };
    kiln_kernels::register_op(Arc::new(ScaledSoftmax)).unwrap();
    // odd rows and columns, a single column, and more rows than one workgroup (64) holds
    for (dims, scale) in [
        (vec![3, 7, 5], 0.7),
        (vec![1, 1], 2.0),
        (vec![130, 33], -1.5),
        (vec![9], 3.0),
    ] {
        let x = data(&dims, DType::F32, 5, -3.0, 3.0);
        let what = format!("scaled_softmax {dims:?}");
        let f = move |v: &[Tensor]| scaled_softmax(&v[0], scale);
        check(&what, &dev, &[x], &same, &f, true, (1e-5, 1e-6));
    }
    // a strided input is packed before the kernel runs; offsets too (a slice of rows)
    let x = data(&[6, 11], DType::F32, 6, -2.0, 2.0);
    let f = |v: &[Tensor]| scaled_softmax(&v[0], 1.1);
    check(
        "strided",
        &dev,
        std::slice::from_ref(&x),
        &transposed,
        &f,
        true,
        (1e-5, 1e-6),
    );
    let sliced = |_: usize, t: Tensor| t.narrow(0, 2, 3);
    check("offset", &dev, &[x], &sliced, &f, true, (1e-5, 1e-6));
}

#[test]
fn naga_errors_point_at_the_wgsl_line() {
    struct Bad(&'static str, &'static str);
    impl CustomOp for Bad {
        fn name(&self) -> &str {
            self.0
        }
        fn infer(&self, _: &Attrs, i: &[Meta]) -> Result<Meta> {
            Ok(i[0].clone())
        }
        fn cpu(&self, _: &Attrs, i: &[TensorData], _: &Meta) -> Result<TensorData> {
            Ok(i[0].clone())
        }
        fn wgsl(&self) -> Option<&str> {
            Some(self.1)
        }
    }
    let header = "@group(0) @binding(0) var<storage, read> params: array<u32>;\n";
    let parse = "@compute @workgroup_size(1)\nfn main() {\n    let x = 1u +;\n}\n";
    let e = kiln_kernels::register_op(Arc::new(Bad("test_parse", parse)))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("register_op(test_parse): WGSL line 3, column"),
        "{e}"
    );
    let types = format!(
        "{header}@compute @workgroup_size(1)\nfn main() {{\n    let x: f32 = params[0];\n}}\n"
    );
    let e = kiln_kernels::register_op(Arc::new(Bad("test_types", types.leak())))
        .unwrap_err()
        .to_string();
    assert!(e.contains("WGSL line 4"), "{e}");
    let no_main = format!("{header}@compute @workgroup_size(1)\nfn run() {{ _ = params[0]; }}\n");
    let e = kiln_kernels::register_op(Arc::new(Bad("test_main", no_main.leak())))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`@compute fn main`"), "{e}");
    let no_params = "@compute @workgroup_size(1)\nfn main() {}\n";
    let e = kiln_kernels::register_op(Arc::new(Bad("test_params", no_params)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("@group(0) @binding(0)"), "{e}");
    // none of them was registered
    let names = kiln_core::op::custom::registered_ops();
    assert!(!names.iter().any(|n| n.starts_with("test_")), "{names:?}");
}

/// `y = x * table[i % n]`: a custom op whose params header carries an `n`-word table, so that
/// params of every size reach the kernel (CUDA passes up to 4 KiB by value, more through a
/// device buffer).
struct Table;

fn table(n: usize) -> Vec<f32> {
    (0..n)
        .map(|j| ((j * 37) % 101) as f32 / 50.0 - 1.0)
        .collect()
}

impl CustomOp for Table {
    fn name(&self) -> &str {
        "test_table"
    }
    fn infer(&self, _: &Attrs, i: &[Meta]) -> Result<Meta> {
        Ok(i[0].clone())
    }
    fn cpu(&self, attrs: &Attrs, i: &[TensorData], out: &Meta) -> Result<TensorData> {
        let t = table(attrs["n"] as usize);
        let x = i[0].to_vec::<f32>()?;
        let y = x.iter().enumerate().map(|(k, v)| v * t[k % t.len()]);
        TensorData::new(y.collect(), out.1.clone())
    }
    fn wgsl(&self) -> Option<&str> {
        Some(
            "#include \"common.wgsl\"
struct Params { n: u32, table: array<f32> }
@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = group_index(wid, nwg) * 64u + lid.x;
    if i < arrayLength(&y) { y[i] = x[i] * params.table[i % params.n]; }
}",
        )
    }
    fn launch(&self, attrs: &Attrs, _: &[Meta], out: &Meta) -> Result<KernelLaunch> {
        let t = table(attrs["n"] as usize);
        let mut params = vec![t.len() as u32];
        params.extend(t.iter().map(|v| v.to_bits()));
        Ok(KernelLaunch {
            params,
            grid: Grid::Invocations {
                count: out.1.numel() as u64,
                workgroup_size: 64,
            },
        })
    }
}

#[test]
fn params_of_every_size_reach_the_kernel() {
    let Some(dev) = kiln_conformance::device() else {
        return;
    };
    kiln_kernels::register_op(Arc::new(Table)).unwrap();
    let x = data(&[7, 331], DType::F32, 9, -2.0, 2.0);
    // 8 bytes, 804 (CUDA's 1 KiB by value) and 6 KiB (a device buffer on CUDA)
    for n in [1usize, 200, 1500] {
        let f = move |v: &[Tensor]| {
            Tensor::custom(
                "test_table",
                Attrs::from([("n".into(), n as f64)]),
                &[&v[0]],
            )
        };
        check(
            &format!("table of {n}"),
            &dev,
            std::slice::from_ref(&x),
            &same,
            &f,
            false,
            (0.0, 0.0),
        );
    }
}

#[test]
fn a_cpu_only_op_on_a_gpu_says_so() {
    let Some(dev) = kiln_conformance::device() else {
        return;
    };
    if dev.name() == "cpu" {
        return;
    }
    struct CpuOnly;
    impl CustomOp for CpuOnly {
        fn name(&self) -> &str {
            "cpu_only"
        }
        fn infer(&self, _: &Attrs, i: &[Meta]) -> Result<Meta> {
            Ok(i[0].clone())
        }
        fn cpu(&self, _: &Attrs, i: &[TensorData], _: &Meta) -> Result<TensorData> {
            Ok(i[0].clone())
        }
    }
    kiln_kernels::register_op(Arc::new(CpuOnly)).unwrap();
    let x = Tensor::from_data(&data(&[2, 3], DType::F32, 1, -1.0, 1.0), &dev).unwrap();
    let e = Tensor::custom("cpu_only", Attrs::new(), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cpu_only: has no WGSL kernel"), "{e}");
}

/// What the CUDA backend compiles, checked without a GPU: the kernel translates to CUDA C with
/// its workgroup size as the block size.
#[test]
fn the_kernel_translates_to_cuda_c() {
    use kiln_kernels::cuda::{Dialect, translate};
    let wgsl = ScaledSoftmax.wgsl().unwrap();
    let m = translate(wgsl, "scaled_softmax", Dialect::Cuda).unwrap();
    assert_eq!(m.kernels.len(), 1);
    assert!(m.source.contains("__global__"), "{}", m.source);
    let k = &m.kernels[0];
    assert_eq!(k.name, "main_kernel");
    assert_eq!(k.workgroup_size, [64, 1, 1]);
}
