#!/usr/bin/python3
"""The GPT spillway trains, written in PyTorch, for side-by-side throughput and loss checks.

Same architecture, parameter names and initialisation rule as spillway's gpt (nanoGPT
layout, byte vocabulary, pre-LayerNorm, exact GELU, untied head, no dropout), AdamW.

  /usr/bin/python3 bench/pytorch/gpt_torch.py   (Debian python3-torch) --model gpt-s --threads 2 --steps 20 --json out.json

Debian's PyTorch runs its matrix products in BLIS: for N threads it needs BLIS_NUM_THREADS=N
in the environment before torch is imported, which this script sets.
"""
import argparse
import json
import math
import os
import sys
import time

MODELS = {
    "gpt-s": dict(layers=8, d_model=256, heads=8, seq=128, batch=16),
    "gpt-m": dict(layers=12, d_model=512, heads=8, seq=256, batch=8),
    "gpt-l": dict(layers=24, d_model=1024, heads=16, seq=256, batch=8),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=MODELS, default="gpt-s")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of --steps each; the median is reported")
    p.add_argument("--json", help="write the result here")
    return p.parse_args()


args = parse_args()
os.environ["BLIS_NUM_THREADS"] = str(args.threads)
os.environ["OMP_NUM_THREADS"] = str(args.threads)
import torch  # noqa: E402  (the environment above must be set first)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        hd = d // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
        y = F.softmax(s, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, layers, d_model, heads, seq, vocab=256):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        self.head = nn.Linear(d_model, vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    shape = MODELS[args.model]
    torch.manual_seed(1234)
    model = Gpt(shape["layers"], shape["d_model"], shape["heads"], shape["seq"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    b, t = shape["batch"], shape["seq"]
    gen = torch.Generator().manual_seed(7)

    def step():
        idx = torch.randint(0, 256, (b, t), generator=gen)
        tgt = torch.randint(0, 256, (b, t), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    rates = []
    step_seconds = []  # every timed step, for statistics that match spillway's report.json
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            step_start = time.perf_counter()
            step()
            step_seconds.append(time.perf_counter() - step_start)
        elapsed = time.perf_counter() - start
        rates.append(b * t * args.steps / elapsed)
    rates.sort()
    median = rates[len(rates) // 2]
    params = sum(p.numel() for p in model.parameters())
    result = {
        "framework": f"pytorch {torch.__version__}",
        "model": args.model,
        "threads": args.threads,
        "parameters": params,
        "tokens_per_s": median,
        "tokens_per_s_runs": rates,
        "tokens_per_step": b * t,
        "step_seconds": step_seconds,
    }
    print(json.dumps(result))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(result, f, indent=2)
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
