#!/usr/bin/python3
"""PyTorch eager reference for `gochat bench train`: one full training step
(forward, backward, AdamW) of an OPT-shaped model on random weights and tokens.

Run by hand on the same machine as the gochat benchmark:
    /usr/bin/python3 scripts/bench_torch_train.py --model opt-125m --batch 4 --seq 128 --threads 2

The model is transformers' OPTForCausalLM computed the eager way (explicit
attention matmuls, additive mask, fp32 softmax), written out here because the
machine has PyTorch but not transformers. Prints one JSON object:
{"tokens_per_sec", "step_seconds", "peak_rss_bytes", "threads", "torch"}.
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # hidden, ffn, layers, heads, word_embed_proj_dim, pre-LN
    "opt-125m": (768, 3072, 12, 12, 768, True),
    "opt-350m": (1024, 4096, 24, 16, 512, False),
    "opt-1.3b": (2048, 8192, 24, 32, 2048, True),
}


class Layer(nn.Module):
    def __init__(self, h, f, nh, pre):
        super().__init__()
        self.nh, self.pre = nh, pre
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(h, h) for _ in range(4))
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(h), nn.LayerNorm(h)
        self.fc1, self.fc2 = nn.Linear(h, f), nn.Linear(f, h)

    def forward(self, x, mask):
        B, T, H = x.shape
        hs = H // self.nh
        r = x
        if self.pre:
            x = self.self_attn_layer_norm(x)
        q = self.q_proj(x) * hs ** -0.5
        k, v = self.k_proj(x), self.v_proj(x)
        sh = lambda t: t.view(B, T, self.nh, hs).transpose(1, 2)
        w = torch.softmax(sh(q) @ sh(k).transpose(-1, -2) + mask, dim=-1)
        x = self.out_proj((w @ sh(v)).transpose(1, 2).reshape(B, T, H))
        x = r + x
        if not self.pre:
            x = self.self_attn_layer_norm(x)
        r = x
        if self.pre:
            x = self.final_layer_norm(x)
        x = r + self.fc2(F.relu(self.fc1(x)))
        if not self.pre:
            x = self.final_layer_norm(x)
        return x


class OPT(nn.Module):
    def __init__(self, h, f, l, nh, p, pre, vocab=50272, maxpos=2048):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, p)
        self.embed_positions = nn.Embedding(maxpos + 2, h)
        self.project_in = nn.Linear(p, h, bias=False) if p != h else None
        self.project_out = nn.Linear(h, p, bias=False) if p != h else None
        self.final_layer_norm = nn.LayerNorm(h) if pre else None
        self.layers = nn.ModuleList(Layer(h, f, nh, pre) for _ in range(l))

    def forward(self, ids, labels):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        if self.project_in is not None:
            x = self.project_in(x)
        x = x + self.embed_positions(torch.arange(T) + 2)
        mask = torch.full((T, T), torch.finfo(x.dtype).min).triu(1)
        for layer in self.layers:
            x = layer(x, mask)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        if self.project_out is not None:
            x = self.project_out(x)
        logits = x @ self.embed_tokens.weight.T
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="opt-125m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = OPT(*PRESETS[a.model])
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    ids = torch.randint(3, 50272, (a.batch, a.seq))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = m(ids, ids)
        loss.backward()
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"tokens_per_sec": round(a.batch * a.seq / med, 2), "step_seconds": round(med, 4),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "threads": a.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
