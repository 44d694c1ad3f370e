#!/usr/bin/env python3
"""The peer figures for kiln's wgpu_bench on the same GPU: torch.matmul (cuBLAS sgemm, strict
fp32: TF32 off) in TFLOP/s at 1024/4096/8192, an elementwise add and a row sum in GB/s, and a
device-to-device copy in GB/s. Then kiln's bench, so both land in one log.

    python3 tests/bench/wgpu_vs_torch.py            # torch figures, then kiln's wgpu_bench
    python3 tests/bench/wgpu_vs_torch.py --torch-only
"""
import subprocess
import sys

import torch


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


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    for n in (1024, 4096, 8192):
        a = torch.rand(n, n, device=dev) * 2 - 1
        b = torch.rand(n, n, device=dev) * 2 - 1
        s = timed(lambda: torch.matmul(a, b), 3 if n >= 8192 else 10)
        print(f"torch matmul f32 {n}x{n}x{n}: {2 * n**3 / s / 1e12:.2f} TFLOP/s ({s * 1e3:.3f} ms)")
    n = 1 << 26
    x = torch.rand(n, device=dev)
    y = torch.rand(n, device=dev)
    s = timed(lambda: x + y, 20)
    add = 12 * n / s / 1e9
    print(f"torch add f32, {n} elements: {add:.1f} GB/s")
    m = x.view(1 << 14, 1 << 12)
    s = timed(lambda: m.sum(dim=1), 20)
    print(f"torch sum over rows [16384, 4096] f32: {4 * n / s / 1e9:.1f} GB/s")
    out = torch.empty_like(x)
    s = timed(lambda: out.copy_(x), 20)
    print(f"torch device-to-device copy: {8 * n / s / 1e9:.1f} GB/s")
    if "--torch-only" not in sys.argv:
        sys.stdout.flush()
        subprocess.run(["cargo", "run", "--release", "-p", "kiln-kernels", "--example", "wgpu_bench"], check=True)


if __name__ == "__main__":
    main()
