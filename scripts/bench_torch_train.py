#!/usr/bin/python3
"""PyTorch eager reference for `gochat bench train`: one full training step
(forward, backward, AdamW) of an OPT-shaped model on random weights and tokens.

Run by hand on the same machine as the gochat benchmark:
    /usr/bin/python3 scripts/bench_torch_train.py --model opt-125m --batch 4 --seq 128 --threads 2

On a GPU (scripts/gpu-check.sh, row train-bench), in bf16 as DeepSpeed's bf16
mode and gochat's --dtype bf16 mean it (fp32 weights and AdamW state, matmuls
in bf16 under torch.autocast, norms, softmax and the loss in fp32):
    python3 scripts/bench_torch_train.py --device cuda --dtype bf16 --model opt-1.3b \
        --batch 8 --seq 512 --dropout 0.1 --attn eager,sdpa

The model is transformers' OPTForCausalLM computed the eager way (explicit
attention matmuls, additive mask, softmax; --attn sdpa uses
torch.nn.functional.scaled_dot_product_attention instead, which picks a
flash kernel on a GPU), written out here so that the script needs PyTorch
only. It is built directly on the device (random weights: the figures do not
depend on them). --dropout p applies dropout where OPT does (after out_proj
and after fc2), as gochat's training step does with the config's 0.1. The
optimizer is torch.optim.AdamW with its defaults (the foreach implementation
on a GPU). Prints one JSON object a line, one per --attn:
{"model", "params", "batch", "seq", "device", "dtype", "attn", "dropout",
"tokens_per_sec", "step_seconds", "peak_rss_bytes", "device_peak_bytes",
"gpu", "threads", "torch"}.
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
    def __init__(self, h, f, nh, pre, dropout, attn):
        super().__init__()
        self.nh, self.pre, self.dropout, self.attn = nh, pre, dropout, attn
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(h, h) for _ in range(4))
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(h), nn.LayerNorm(h)
        self.fc1, self.fc2 = nn.Linear(h, f), nn.Linear(f, h)

    def drop(self, x):
        return F.dropout(x, self.dropout, self.training) if self.dropout else x

    def forward(self, x, mask):
        B, T, H = x.shape
        hs = H // self.nh
        r = x
        if self.pre:
            x = self.self_attn_layer_norm(x)
        sh = lambda t: t.view(B, T, self.nh, hs).transpose(1, 2)
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(sh(self.q_proj(x)), sh(self.k_proj(x)), sh(self.v_proj(x)), is_causal=True)
        else:
            q = self.q_proj(x) * hs ** -0.5
            k, v = self.k_proj(x), self.v_proj(x)
            w = torch.softmax(sh(q) @ sh(k).transpose(-1, -2) + mask, dim=-1)
            y = w @ sh(v)
        x = r + self.drop(self.out_proj(y.transpose(1, 2).reshape(B, T, H)))
        if not self.pre:
            x = self.self_attn_layer_norm(x)
        r = x
        if self.pre:
            x = self.final_layer_norm(x)
        x = r + self.drop(self.fc2(F.relu(self.fc1(x))))
        if not self.pre:
            x = self.final_layer_norm(x)
        return x


class OPT(nn.Module):
    def __init__(self, h, f, l, nh, p, pre, dropout=0.0, attn="eager", vocab=50272, maxpos=2048):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, p)
        self.embed_positions = nn.Embedding(maxpos + 2, h)
        self.project_in = nn.Linear(p, h, bias=False) if p != h else None
        self.project_out = nn.Linear(h, p, bias=False) if p != h else None
        self.final_layer_norm = nn.LayerNorm(h) if pre else None
        self.layers = nn.ModuleList(Layer(h, f, nh, pre, dropout, attn) for _ in range(l))

    def forward(self, ids, labels):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        if self.project_in is not None:
            x = self.project_in(x)
        x = x + self.embed_positions(torch.arange(T, device=ids.device) + 2)
        mask = torch.full((T, T), torch.finfo(x.dtype).min, device=ids.device).triu(1)
        for layer in self.layers:
            x = layer(x, mask)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        if self.project_out is not None:
            x = self.project_out(x)
        logits = x @ self.embed_tokens.weight.T
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))


def bench(a, attn):
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    if cuda and hasattr(torch.device, "__enter__"):  # torch >= 2: built on the GPU
        with dev:
            m = OPT(*PRESETS[a.model], dropout=a.dropout, attn=attn)
    else:
        m = OPT(*PRESETS[a.model], dropout=a.dropout, attn=attn).to(dev)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    ids = torch.randint(3, 50272, (a.batch, a.seq), device=dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = m(ids, ids)
        loss.backward()
        opt.step()

    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    step()  # warm-up
    sync()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    res = {"model": a.model, "params": sum(p.numel() for p in m.parameters()), "batch": a.batch, "seq": a.seq,
           "device": a.device, "dtype": a.dtype, "attn": attn, "dropout": a.dropout,
           "tokens_per_sec": round(a.batch * a.seq / med, 2), "step_seconds": round(med, 4),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    if cuda:
        res["device_peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        res["gpu"] = torch.cuda.get_device_name(dev)
    del m, opt
    if cuda:
        torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="opt-125m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: matmuls in bf16 under torch.autocast, fp32 weights and AdamW state")
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout after out_proj and fc2 (OPT's config: 0.1)")
    ap.add_argument("--attn", default="eager", help="eager, sdpa, or both comma-separated (one JSON line each)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for attn in a.attn.split(","):
        if attn not in ("eager", "sdpa"):
            ap.error("--attn %r: want eager or sdpa" % attn)
        if attn == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
            ap.error("--attn sdpa needs torch >= 2.0 (this is %s)" % torch.__version__)
        print(json.dumps(bench(a, attn)), flush=True)


if __name__ == "__main__":
    main()
