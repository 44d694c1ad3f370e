#!/usr/bin/env python3
"""Writes the GELU benchmark's ONNX models and inputs (run.mjs --gelu calls this; not a test).

    pip install onnx numpy
    python3 tests/bench/browser/gelu_onnx.py --out DIR [--sizes 16,20]

Writes into DIR (a temp folder; nothing here is committed):
  gelu20.onnx   one node, ONNX Gelu (opset 20, approximate="none"), input x [n] -> y [n], n free
  gelu_ms.onnx  one node, com.microsoft Gelu (onnxruntime's contrib op, the exact erf form)
  gelu6.onnx    the composition kiln's benchmark writes: Div(sqrt 2) Erf Add(1) Mul(x) Div(2)
  x_<p>.f32     2^p standard-normal float32 values (seed 0), little-endian
  ref_<p>.f32   GELU of them in float64 (x * (1 + erf(x / sqrt 2)) / 2), rounded to float32
  meta.json     versions
"""
import argparse, json, math, os

import numpy as np
import onnx
from onnx import TensorProto, helper


def model(nodes, inits, opsets):
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", f, ["n"])],
                          [helper.make_tensor_value_info("y", f, ["n"])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def scalar(name, v):
    return helper.make_tensor(name, TensorProto.FLOAT, [], [v])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="16,20")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    models = {
        "gelu20": model([helper.make_node("Gelu", ["x"], ["y"], approximate="none")], [], [("", 20)]),
        "gelu_ms": model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], [],
                         [("", 17), ("com.microsoft", 1)]),
        "gelu6": model([
            helper.make_node("Div", ["x", "sqrt2"], ["a"]),
            helper.make_node("Erf", ["a"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]),
            helper.make_node("Mul", ["x", "e1"], ["p"]),
            helper.make_node("Div", ["p", "two"], ["y"]),
        ], [scalar("sqrt2", math.sqrt(2)), scalar("one", 1.0), scalar("two", 2.0)], [("", 17)]),
    }
    for name, m in models.items():
        onnx.save(m, os.path.join(a.out, name + ".onnx"))
    erf = np.vectorize(math.erf)
    rng = np.random.default_rng(0)
    for p in map(int, a.sizes.split(",")):
        x = rng.standard_normal(1 << p).astype(np.float32)
        x.tofile(os.path.join(a.out, f"x_{p}.f32"))
        x64 = x.astype(np.float64)
        # math.erf per element is slow at 2^24 (~10 s); fine for a benchmark's setup.
        ref = x64 * (1 + erf(x64 / math.sqrt(2))) / 2
        ref.astype(np.float32).tofile(os.path.join(a.out, f"ref_{p}.f32"))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"onnx": onnx.__version__, "numpy": np.__version__, "models": sorted(models)}, f)
    print(f"gelu_onnx.py: {', '.join(sorted(models))} and inputs 2^{a.sizes} in {a.out}")


if __name__ == "__main__":
    main()
