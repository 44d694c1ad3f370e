#!/usr/bin/env python3
"""kiln's ONNX import against onnxruntime, same machine, same run, same threads.

For each model: `kiln bench onnx` (median of timed runs after warm-up, input of the declared
shape) and onnxruntime on an input of the same shape (median of the same number of runs), then
the ratio kiln / onnxruntime (1.0 = as fast; the goal is <= 1.0). On the CPU by default;
`--device cuda` runs kiln on CUDA against onnxruntime's CUDAExecutionProvider (onnxruntime-gpu),
both reading their outputs back to the host each run. `--rounds N` alternates the two N times.

    pip install onnxruntime numpy
    cargo build --release -p kiln
    python3 tests/bench/onnx_vs_onnxruntime.py [--threads 2] [--runs 20] [--device cuda] [models...]
Default models: squeezenet and resnet50 of the light zoo in shared/conformance/onnx-light.
"""
import argparse, os, re, subprocess, time
import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIGHT = os.path.join(os.path.dirname(ROOT), "shared", "conformance", "onnx-light")


def ort_ms(path, threads, runs, device):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    provider = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[device]
    if provider not in ort.get_available_providers():
        raise SystemExit(f"onnxruntime {ort.__version__} has no {provider} "
                         f"(it has {ort.get_available_providers()})")
    s = ort.InferenceSession(path, opts, providers=[provider])
    inp = s.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    for _ in range(3):
        s.run(None, {inp.name: x})
    ms = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, {inp.name: x})
        ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    return ms[len(ms) // 2], ms[0], ms[-1], shape


def kiln_ms(kiln, path, threads, runs, device):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [kiln, "bench", "onnx", path, "--runs", str(runs), "--device", device]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1]
    m = re.search(r"median ([0-9.]+) ms, min ([0-9.]+) ms, max ([0-9.]+) ms", out.stdout)
    return tuple(float(v) for v in m.groups()), out.stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "target", "release", "kiln"))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    models = a.models or [os.path.join(LIGHT, f"light_{m}.onnx") for m in ("squeezenet", "resnet50")]
    print(f"onnxruntime {ort.__version__} on {a.device}, {a.threads} threads, {a.runs} timed runs each")
    for path in models:
        name = os.path.basename(path)
        for _ in range(a.rounds):
            o = ort_ms(path, a.threads, a.runs, a.device)
            k, said = kiln_ms(a.kiln, path, a.threads, a.runs, a.device)
            print(f"{name} input {o[3]}: onnxruntime median {o[0]:.2f} ms (min {o[1]:.2f}, max {o[2]:.2f})")
            if k is None:
                print(f"  kiln: failed: {said}")
                continue
            print(f"  kiln median {k[0]:.2f} ms (min {k[1]:.2f}, max {k[2]:.2f}); kiln/onnxruntime = {k[0] / o[0]:.2f}x")


if __name__ == "__main__":
    main()
