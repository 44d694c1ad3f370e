#!/usr/bin/env python3
"""PyTorch CPU training throughput of the same MNIST CNN that `kiln bench train-mnist` times.

Same model (conv 1->32 3x3, conv 32->64 3x3, max-pool 2, fc 9216->128, fc 128->10, no dropout),
same batch size, same optimizer (Adam 1e-3), same real MNIST batches, same warm-up (2 steps).

    python3 tests/bench/mnist_torch_cpu.py                  # PyTorch only
    python3 tests/bench/mnist_torch_cpu.py --kiln 1234.5    # and the ratio kiln / PyTorch
    python3 tests/bench/mnist_torch_cpu.py --run-kiln        # runs `kiln bench train-mnist` too

Prints `torch images/s: X` and, with a kiln figure, `kiln/torch: R`.
"""
import argparse
import gzip
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def find_mnist(explicit):
    if explicit:
        return Path(explicit)
    if os.environ.get("KILN_MNIST_DIR"):
        return Path(os.environ["KILN_MNIST_DIR"])
    for d in [Path.cwd(), *Path.cwd().parents]:
        if (d / "shared/data/mnist").is_dir():
            return d / "shared/data/mnist"
    sys.exit("no MNIST directory: pass --data DIR or set KILN_MNIST_DIR")


def load_train(dir):
    with gzip.open(dir / "train-images-idx3-ubyte.gz") as f:
        raw = f.read()
    assert int.from_bytes(raw[:4], "big") == 2051, "not an IDX images file"
    n = int.from_bytes(raw[4:8], "big")
    images = np.frombuffer(raw, np.uint8, offset=16).reshape(n, 1, 28, 28)
    with gzip.open(dir / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    ap.add_argument("--data")
    ap.add_argument("--kiln", type=float, help="kiln's images/s to compare with")
    ap.add_argument("--run-kiln", action="store_true", help="run `kiln bench train-mnist` for the figure")
    ap.add_argument("--kiln-bin", default="target/release/kiln")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)

    images, labels = load_train(find_mnist(a.data))
    x_all = (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.1307) / 0.3081
    y_all = torch.from_numpy(labels.astype(np.int64))
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n, b = len(y_all), a.batch_size

    def step(s):
        idx = torch.arange(s * b, (s + 1) * b) % n
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        opt.step()
        return loss.item()

    for s in range(2):
        step(s)
    start = time.perf_counter()
    for s in range(a.steps):
        step(2 + s)
    secs = time.perf_counter() - start
    torch_ips = a.steps * b / secs
    print(f"torch {torch.__version__} CPU ({torch.get_num_threads()} threads): batch {b}, "
          f"{a.steps} steps, {secs / a.steps:.3f} s/step")
    print(f"torch images/s: {torch_ips:.1f}")

    kiln_ips = a.kiln
    if a.run_kiln:
        out = subprocess.run([a.kiln_bin, "bench", "train-mnist", "--device", "cpu",
                              "--batch-size", str(b), "--steps", str(a.steps)],
                             check=True, capture_output=True, text=True).stdout
        print(out.strip())
        kiln_ips = float(re.search(r"([\d.]+) images/s", out).group(1))
    if kiln_ips:
        print(f"kiln images/s: {kiln_ips:.1f}")
        print(f"kiln/torch: {kiln_ips / torch_ips:.2f}")


if __name__ == "__main__":
    main()
