#!/usr/bin/env python3
"""Exports the kiln-trained MNIST CNN (demos/mnist/models/mnist.safetensors) to ONNX for the
browser benchmark (run.mjs calls this; it is not a test) and writes the benchmark's inputs.

    pip install onnx numpy safetensors onnxruntime
    python3 tests/bench/browser/export_onnx.py --out DIR [--images 64]

Writes into DIR (a temp folder; nothing here is committed):
  mnist.onnx        the same network as native/src/models/mnist.rs, built with onnx.helper:
                    Conv(1->32,3x3,stride 1,no pad) Relu Conv(32->64) Relu MaxPool(2x2,stride 2)
                    Flatten (NCHW order: c, h, w, as kiln's flatten(1, -1)) Gemm(9216->128) Relu
                    Gemm(128->10); weights are the safetensors tensors, unchanged (OIHW, [out, in])
  inputs.f32        the first N MNIST test images, normalised as kiln trained:
                    (x / 255 - 0.1307) / 0.3081, float32 little-endian [N, 1, 28, 28]
  labels.u8         their labels
  ref_onnxruntime.f32   onnxruntime's (native, CPU) logits on them [N, 10]
  ref_numpy.f32     a plain numpy forward of the same weights (float64 accumulate) [N, 10]
  meta.json         shapes, versions, max abs differences
Prints the max abs difference between onnxruntime and the numpy forward; run.mjs then compares
kiln's own logits (in the page) with both.
"""
import argparse, gzip, json, os, struct, sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    sys.exit(f"export_onnx.py: {stem}[.gz] not found in {data_dir}")


def build_onnx(w):
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.ascontiguousarray(w[k]), k) for k in sorted(w)]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["c1"],
                         kernel_shape=[3, 3], strides=[1, 1], pads=[0, 0, 0, 0]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "conv2.weight", "conv2.bias"], ["c2"],
                         kernel_shape=[3, 3], strides=[1, 1], pads=[0, 0, 0, 0]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "fc2.weight", "fc2.bias"], ["output"], transB=1),
    ]
    g = helper.make_graph(nodes, "kiln_mnist_cnn",
                          [helper.make_tensor_value_info("input", f, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("output", f, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                          producer_name="kiln tests/bench/browser/export_onnx.py")
    onnx.checker.check_model(m)
    return m


def numpy_forward(w, x):
    """float64 reference: conv (valid, stride 1) relu conv relu maxpool2 flatten(c,h,w) fc relu fc."""
    def conv(x, wt, b):
        n, c, h, wd = x.shape
        o, _, kh, kw = wt.shape
        oh, ow = h - kh + 1, wd - kw + 1
        cols = np.empty((n, c, kh, kw, oh, ow))
        for i in range(kh):
            for j in range(kw):
                cols[:, :, i, j] = x[:, :, i:i + oh, j:j + ow]
        y = np.einsum("nckluv,ockl->nouv", cols, wt, optimize=True)
        return y + b[None, :, None, None]
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = x.astype(np.float64)
    y = np.maximum(conv(x, w["conv1.weight"], w["conv1.bias"]), 0)
    y = np.maximum(conv(y, w["conv2.weight"], w["conv2.bias"]), 0)
    n, c, h, wd = y.shape
    y = y.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    y = y.reshape(n, -1)
    y = np.maximum(y @ w["fc1.weight"].T + w["fc1.bias"], 0)
    return y @ w["fc2.weight"].T + w["fc2.bias"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--weights", default=os.path.join(ROOT, "demos/mnist/models/mnist.safetensors"))
    ap.add_argument("--data", default=os.environ.get("KILN_MNIST_DATA", "/work/shared/data/mnist"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    w = load_file(a.weights)
    expect = {"conv1.weight": (32, 1, 3, 3), "conv1.bias": (32,), "conv2.weight": (64, 32, 3, 3),
              "conv2.bias": (64,), "fc1.weight": (128, 9216), "fc1.bias": (128,),
              "fc2.weight": (10, 128), "fc2.bias": (10,)}
    got = {k: tuple(v.shape) for k, v in w.items()}
    if got != expect:
        sys.exit(f"export_onnx.py: unexpected tensors in {a.weights}: {got}")

    images = read_idx(find(a.data, "t10k-images-idx3-ubyte"))[:a.images]
    labels = read_idx(find(a.data, "t10k-labels-idx1-ubyte"))[:a.images]
    x = ((images.astype(np.float32) / 255 - np.float32(0.1307)) / np.float32(0.3081))
    x = x.astype(np.float32).reshape(-1, 1, 28, 28)

    model = build_onnx(w)
    onnx_path = os.path.join(a.out, "mnist.onnx")
    onnx.save(model, onnx_path)

    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    ort_logits = sess.run(None, {"input": x})[0].astype(np.float32)
    ref = numpy_forward(w, x)
    diff = float(np.abs(ort_logits - ref).max())
    agree = float((ort_logits.argmax(1) == ref.argmax(1)).mean())
    acc = float((ref.argmax(1) == labels).mean())

    x.tofile(os.path.join(a.out, "inputs.f32"))
    labels.astype(np.uint8).tofile(os.path.join(a.out, "labels.u8"))
    ort_logits.tofile(os.path.join(a.out, "ref_onnxruntime.f32"))
    ref.astype(np.float32).tofile(os.path.join(a.out, "ref_numpy.f32"))
    meta = {"images": int(x.shape[0]), "onnx": onnx.__version__, "onnxruntime": ort.__version__,
            "numpy": np.__version__, "onnx_bytes": os.path.getsize(onnx_path),
            "max_abs_diff_onnxruntime_vs_numpy": diff, "top1_agree_onnxruntime_vs_numpy": agree,
            "numpy_accuracy_vs_labels": acc}
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"export_onnx.py: {onnx_path} ({meta['onnx_bytes']} bytes), {x.shape[0]} test images; "
          f"onnxruntime {ort.__version__} (native CPU) vs numpy float64 forward: max abs diff "
          f"{diff:.3g}, top-1 agreement {agree:.3f}, accuracy vs labels {acc:.3f}")


if __name__ == "__main__":
    main()
