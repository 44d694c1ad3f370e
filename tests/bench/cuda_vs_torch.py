#!/usr/bin/env python3
"""kiln's CUDA backend beside PyTorch eager on the same GPU, in one log, with ratios.

(a) MNIST CNN training images/s at batch 64 and 256 (strict fp32: TF32 off; same model, Adam
    and 2 warm-up steps as `kiln bench train-mnist`), both sides' data already on the GPU. Each
    side also prints its host's ms per step before the final wait, and PyTorch its GPU kernel
    time per step: a rate near the host's time is bound by the host;
(b) matmul f32 4096: torch.matmul against kiln's cuBLAS path and its translated WGSL GEMM;
(c) an elementwise add, a row sum, two column sums (the GPT's bias gradients) and a row softmax
    in GB/s against a device-to-device copy.

    python3 tests/bench/cuda_vs_torch.py --kiln-bin DIR/kiln --kiln-lib-test DIR/kiln-lib-test

`--kiln-bin` is `kiln` built with `--features cuda`; `--kiln-lib-test` is the kiln lib test
binary with the `cuda` feature, whose ignored `cuda::bench` test prints kiln's (b) and (c).
"""
import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist_torch_cpu import Net, find_mnist, load_train  # noqa: E402


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def torch_mnist(x_all, y_all, batch, steps):
    """Images/s, the host's ms per step before the final wait, and the GPU's kernel ms per step
    (torch.profiler's sum of kernel times over 20 more steps): with kiln's host figure, these
    tell whether a side's rate is bound by its host or by its kernels."""
    torch.manual_seed(0)
    model = Net().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = len(y_all)

    def step(s):
        idx = torch.arange(s * batch, (s + 1) * batch, device="cuda") % n
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        opt.step()

    for s in range(2):
        step(s)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for s in range(steps):
        step(2 + s)
    issued = time.perf_counter() - start
    torch.cuda.synchronize()
    rate = steps * batch / (time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for s in range(20):
            step(2 + steps + s)
        torch.cuda.synchronize()
    kernel_us = sum(e.device_time_total for e in prof.key_averages()
                    if e.device_type == torch.autograd.DeviceType.CUDA)
    return rate, 1e3 * issued / steps, kernel_us / 20 / 1e3


def run(cmd):
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    print((p.stdout + p.stderr).strip(), flush=True)
    return p.stdout + p.stderr


def figure(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


SUMMARY = []


def ratio(label, kiln, other, other_name="torch"):
    if kiln is None:
        line = f"{label}: kiln figure missing"
    else:
        line = f"{label}: kiln {kiln:.2f} / {other_name} {other:.2f} = {kiln / other:.2f}x"
    print(line, flush=True)
    SUMMARY.append(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-bin", help="kiln built with --features cuda")
    ap.add_argument("--kiln-lib-test", help="kiln's lib test binary built with --features cuda")
    ap.add_argument("--steps", type=int, default=50, help="timed MNIST training steps per batch size")
    ap.add_argument("--data")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)

    data = find_mnist(a.data)
    images, labels = load_train(data)
    x_all = ((torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.1307) / 0.3081).to(dev)
    y_all = torch.from_numpy(labels.astype(np.int64)).to(dev)
    for batch in (64, 256):
        t, host_ms, gpu_ms = torch_mnist(x_all, y_all, batch, a.steps)
        print(f"torch mnist train batch {batch}: {t:.1f} images/s, host {host_ms:.3f} ms/step before "
              f"the wait, GPU kernels {gpu_ms:.3f} ms/step", flush=True)
        k = None
        if a.kiln_bin:
            out = run([a.kiln_bin, "bench", "train-mnist", "--device", "cuda", "--batch-size", str(batch),
                       "--steps", str(a.steps), "--data", str(data)])
            k = figure(r"([\d.]+) images/s", out)
        ratio(f"mnist train batch {batch} images/s", k, t)

    n = 4096
    x = torch.rand(n, n, device=dev) * 2 - 1
    y = torch.rand(n, n, device=dev) * 2 - 1
    s = timed(lambda: torch.matmul(x, y), 10)
    tm = 2 * n**3 / s / 1e12
    print(f"torch matmul f32 {n}: {tm:.2f} TFLOP/s")
    length = 1 << 26
    u = torch.rand(length, device=dev)
    v = torch.rand(length, device=dev)
    tadd = 12 * length / timed(lambda: u + v, 20) / 1e9
    rows = u.view(1 << 14, 1 << 12)
    tsum = 4 * length / timed(lambda: rows.sum(dim=1), 20) / 1e9
    tsm = 8 * length / timed(lambda: torch.softmax(rows, dim=1), 20) / 1e9
    tcols = {}
    for width in (384, 1536):
        c = torch.rand(16384, width, device=dev) * 2 - 1
        tcols[width] = 4 * c.numel() / timed(lambda: c.sum(dim=0), 20) / 1e9
    for n, width in ((16384, 384), (98304, 256)):
        c = torch.rand(n, width, device=dev) * 2 - 1
        g = 4 * c.numel() / timed(lambda: c.sum(dim=1), 20) / 1e9
        sm = 8 * c.numel() / timed(lambda: torch.softmax(c, dim=1), 20) / 1e9
        print(f"torch short rows [{n}, {width}]: sum {g:.1f} GB/s, softmax {sm:.1f} GB/s", flush=True)
    print("torch column sums: " + ", ".join(f"[16384, {w}] {g:.1f} GB/s" for w, g in tcols.items()),
          flush=True)
    out = torch.empty_like(u)
    tcopy = 8 * length / timed(lambda: out.copy_(u), 20) / 1e9
    print(f"torch add: {tadd:.1f} GB/s, row sum: {tsum:.1f} GB/s, softmax: {tsm:.1f} GB/s, "
          f"device copy: {tcopy:.1f} GB/s", flush=True)
    if a.kiln_lib_test:
        text = run([a.kiln_lib_test, "cuda::bench", "--ignored", "--nocapture", "--test-threads", "1"])
        ratio("matmul 4096 cublas TFLOP/s", figure(r"cublas: ([\d.]+) TFLOP/s", text), tm)
        ratio("matmul 4096 translated-wgsl TFLOP/s", figure(r"translated-wgsl: ([\d.]+) TFLOP/s", text), tm)
        kcopy = figure(r"device copy f32, \d+ elements: ([\d.]+) GB/s", text)
        kadd = figure(r"kiln add f32, \d+ elements: ([\d.]+) GB/s", text)
        ksum = figure(r"kiln sum over rows \[16384, 4096\] f32: ([\d.]+) GB/s", text)
        ksm = figure(r"kiln softmax rows \[16384, 4096\] f32: ([\d.]+) GB/s", text)
        ratio("add GB/s vs torch add", kadd, tadd)
        ratio("row sum GB/s vs torch sum", ksum, tsum)
        ratio("softmax GB/s vs torch softmax", ksm, tsm)
        for w, g in tcols.items():
            kc = figure(rf"kiln sum over columns \[16384, {w}\] f32: ([\d.]+) GB/s", text)
            ratio(f"column sum [16384, {w}] GB/s vs torch sum", kc, g)
        if kcopy:
            ratio("add GB/s vs device copy (cuMemcpyDtoD)", kadd, kcopy, "copy")
            ratio("row sum GB/s vs device copy (cuMemcpyDtoD)", ksum, kcopy, "copy")
            ratio("softmax GB/s vs device copy (cuMemcpyDtoD)", ksm, kcopy, "copy")
        ratio("device copy GB/s vs torch copy_", kcopy, tcopy)
    print("\nsummary (same run, same GPU; strict fp32, TF32 off on both sides):")
    for line in SUMMARY:
        print("  " + line)


if __name__ == "__main__":
    main()
