#!/usr/bin/env python3
"""kiln's CPU backend against onnxruntime on the same machine, in the same run.

Runs kiln-core's `ops` bench in JSON mode (KILN_BENCH_JSON=1), builds the same workloads as
ONNX graphs (onnx.helper) and times them in onnxruntime (median of runs, default threads), then
prints throughput and the ratio kiln/onnxruntime (1.0 = as fast; the matmul goal is >= 0.8).

    pip install onnxruntime onnx numpy
    python3 tests/bench/cpu_vs_onnxruntime.py
    python3 tests/bench/cpu_vs_onnxruntime.py --threads 2 --bench-bin PATH   # no cargo: a built
        # `cargo bench -p kiln-core --bench ops --no-run` executable (e.g. on the GPU machine)
"""
import argparse, json, os, subprocess, time
import numpy as np
import onnx
from onnx import TensorProto, helper
import onnxruntime as ort

BIG = 16 << 20
THREADS = 0  # 0: each library's default; else both kiln (rayon) and onnxruntime use this many
CONVS = {"mnist_conv1": ([64, 1, 28, 28], [32, 1, 3, 3], 0),
         "mnist_conv2": ([64, 32, 26, 26], [64, 32, 3, 3], 0),
         "resnet_64c_56x56": ([8, 64, 56, 56], [64, 64, 3, 3], 1)}


def session(nodes, inputs, output):
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, f, s) for n, s in inputs],
                          [helper.make_tensor_value_info(output, f, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    opts = ort.SessionOptions()
    if THREADS:
        opts.intra_op_num_threads = THREADS
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def median_seconds(sess, feeds):
    sess.run(None, feeds)
    times, start = [], time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < 1.0 and len(times) < 200):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def onnxruntime_times():
    rng = np.random.default_rng(0)
    r = lambda s: rng.uniform(-1, 1, s).astype(np.float32)
    out = {}
    for n in (256, 512, 1024):
        s = session([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [n, n]), ("b", [n, n])], "y")
        out[f"matmul_{n}"] = median_seconds(s, {"a": r((n, n)), "b": r((n, n))})
    for name, (x, w, p) in CONVS.items():
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[p] * 4)
        s = session([node], [("x", x), ("w", w)], "y")
        out[f"conv2d_{name}"] = median_seconds(s, {"x": r(x), "w": r(w)})
    s = session([helper.make_node("Add", ["a", "b"], ["y"])], [("a", [BIG]), ("b", [BIG])], "y")
    out["add_16m"] = median_seconds(s, {"a": r(BIG), "b": r(BIG)})
    s = session([helper.make_node("ReduceSum", ["a"], ["y"], keepdims=0)], [("a", [BIG])], "y")
    out["sum_16m"] = median_seconds(s, {"a": r(BIG)})
    return out


def kiln_results(bench_bin):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, KILN_BENCH_JSON="1")
    if THREADS:
        env["RAYON_NUM_THREADS"] = str(THREADS)
    cmd = [bench_bin, "--bench"] if bench_bin else ["cargo", "bench", "-q", "-p", "kiln-core",
                                                   "--bench", "ops"]
    p = subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True, text=True)
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def main():
    global THREADS
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="threads for both (0: defaults)")
    ap.add_argument("--bench-bin", help="kiln-core's built `ops` bench executable (else cargo)")
    a = ap.parse_args()
    THREADS = a.threads
    kiln = kiln_results(a.bench_bin)
    onnx_t = onnxruntime_times()
    print(f"threads: {THREADS or 'default'}")
    print(f"{'workload':<26}{'kiln':>16}{'onnxruntime':>16}{'kiln/ort':>10}")
    for k in kiln:
        o = onnx_t[k["name"]]
        unit, work = ("GFLOP/s", k["flops"]) if k["flops"] else ("GB/s", k["bytes"])
        kt, ot = work / k["seconds"] / 1e9, work / o / 1e9
        print(f"{k['name']:<26}{kt:>9.2f} {unit:<6}{ot:>9.2f} {unit:<6}{kt / ot:>10.2f}")


if __name__ == "__main__":
    main()
