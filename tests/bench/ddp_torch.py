#!/usr/bin/env python3
"""PyTorch DDP (NCCL) training of the MNIST CNN, the baseline of `kiln train mnist --gpus N`.

One process per GPU (torchrun), the same model (`mnist_torch_cpu.Net`) and Adam 1e-3, strict
fp32 (TF32 off), each rank on its contiguous shard of the training set already on its GPU, the
same per-GPU batch. Rank 0 prints the global images/s over the timed steps:

    torchrun --nproc-per-node 2 tests/bench/ddp_torch.py --batch-size 64 --steps 300
    torchrun --nproc-per-node 1 tests/bench/ddp_torch.py --batch-size 64 --steps 300
"""
import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist_torch_cpu import Net, find_mnist, load_train  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64, help="images per GPU per step")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--data", default=None)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    images, labels = load_train(find_mnist(a.data))
    per = len(labels) // world
    x = torch.tensor(images[rank * per : (rank + 1) * per], device="cuda").float() / 255.0
    x = (x - 0.1307) / 0.3081
    y = torch.tensor(labels[rank * per : (rank + 1) * per], device="cuda").long()
    torch.manual_seed(0)
    model = DDP(Net().cuda(), device_ids=[local])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(s):
        idx = torch.arange(s * a.batch_size, (s + 1) * a.batch_size, device="cuda") % per
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()

    for s in range(a.warmup):
        step(s)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for s in range(a.steps):
        step(a.warmup + s)
    torch.cuda.synchronize()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        ips = a.steps * a.batch_size * world / seconds
        print(f"torch DDP: {world} GPUs, batch {a.batch_size} per GPU: {ips:.0f} images/s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
