#!/usr/bin/env python3
"""kiln's character-level GPT training beside the same model in PyTorch eager, one log, ratio.

The model is kiln's `models::gpt::Gpt`: token + position embeddings, pre-norm blocks (LayerNorm,
causal multi-head attention with a fused qkv projection, LayerNorm, Linear 4x, GELU tanh form,
Linear), a final LayerNorm and an output layer tied to the token embedding; AdamW, gradient
clipping at 1.0, strict fp32 (TF32 off), dropout 0 (so both do the same arithmetic).

kiln's figure is tokens/s from the step lines of `kiln train text --device cuda --log` (the
median over the logged groups after the first, which holds compilation); PyTorch's is timed
with CUDA events over the same number of steps after warm-up, on random windows of the same
corpus already on the GPU.

    python3 tests/bench/gpt_vs_torch.py --kiln-bin DIR/kiln --data DIR/shakespeare [--steps 64] [--profile]
"""
import argparse
import gzip
import json
import math
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        heads = lambda z: z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (heads(q) @ heads(k).transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ heads(v)).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, context, dim, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            h = b(h)
        return self.ln_f(h) @ self.tok.weight.t()


def corpus(data):
    plays = sorted((Path(data) / "plays").glob("*.txt.gz"))
    return "\n\n".join(gzip.open(p, "rt").read() for p in plays)


def torch_tokens_per_sec(text, a):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text[:2_000_000]], device="cuda")
    model = Gpt(len(vocab), a.context, a.dim, a.layers, a.heads).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step():
        starts = torch.randint(0, len(ids) - a.context - 1, (a.batch,), device="cuda")
        rows = starts[:, None] + torch.arange(a.context + 1, device="cuda")
        w = ids[rows]
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.steps // 5):
            step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / (a.steps // 5))
    per_step = statistics.median(times)
    if a.profile:
        # Per-kernel device time over a few steps, to set beside `kiln train text --profile`.
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70))
        print("(totals over 4 steps)")
    return a.batch * a.context / per_step, (min(times), max(times))


def kiln_tokens_per_sec(a):
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "log.jsonl"
        cmd = [a.kiln_bin, "train", "text", "--device", "cuda", "--data", a.data, "--quiet",
               "--context", str(a.context), "--dim", str(a.dim), "--layers", str(a.layers),
               "--heads", str(a.heads), "--batch-size", str(a.batch), "--dropout", "0",
               "--max-steps", str(a.steps + 16), "--eval-every", "100000",
               "--out", str(Path(d) / "gpt.safetensors"), "--log", str(log)]
        subprocess.run(cmd, check=True)
        lines = [json.loads(l) for l in log.read_text().splitlines()]
        rates = [l["samples_per_sec"] for l in lines if "lr" in l][1:]
        return statistics.median(rates), (min(rates), max(rates))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln-bin", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--profile", action="store_true", help="print PyTorch's per-kernel device time")
    a = p.parse_args()
    text = corpus(a.data)
    t, t_range = torch_tokens_per_sec(text, a)
    k, k_range = kiln_tokens_per_sec(a)
    print(f"gpt {a.layers}x{a.dim} ctx {a.context} batch {a.batch}, fp32 (TF32 off), {torch.cuda.get_device_name()}")
    print(f"  torch {torch.__version__}: {t:,.0f} tokens/s (per-group range {a.batch * a.context / t_range[1]:,.0f}-{a.batch * a.context / t_range[0]:,.0f})")
    print(f"  kiln cuda:   {k:,.0f} tokens/s (step-line range {k_range[0]:,.0f}-{k_range[1]:,.0f})")
    print(f"  kiln / torch = {k / t:.2f}x")


if __name__ == "__main__":
    main()
